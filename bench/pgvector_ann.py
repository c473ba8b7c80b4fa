"""pgvector in the server: exact search against its HNSW index, per namespace size.

One table per size holding N topic-clustered unit vectors of 384 dims (as
bench/ann_crossover.py makes them) in a ``vector(384)`` column. Measured: an
exact search in the server (``ORDER BY embedding <=> q LIMIT 10``, no index),
the HNSW build (``vector_cosine_ops``, m 16, ef_construction 64), an HNSW search
(``hnsw.ef_search`` 40) and its recall@10 against exact, p50 per query. The
server is $FASTAIAGENT_TEST_PGVECTOR, else one from the pgserver wheel in a
temporary folder.

    python bench/pgvector_ann.py                      # 10k, 50k, 100k
    python bench/pgvector_ann.py --sizes 10000 --queries 50
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import summary, write_results
from ann_crossover import make_matrix, unit_rows

K = 10


@contextmanager
def server() -> Iterator[str]:
    given = os.environ.get("FASTAIAGENT_TEST_PGVECTOR")
    if given:
        yield given
        return
    import pgserver

    with tempfile.TemporaryDirectory() as folder:
        started = pgserver.get_server(folder, cleanup_mode="stop")
        try:
            yield started.get_uri()
        finally:
            started.cleanup()


def literal(row: np.ndarray) -> str:
    return "[" + ",".join(map(repr, row.tolist())) + "]"


def measure(conn, size: int, count: int, rng: np.random.Generator) -> dict:
    table = f"bench_ann_{size}"
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE TABLE {table} (id integer PRIMARY KEY, embedding vector(384))")
    rows = make_matrix(rng, size, "clustered")
    with conn.cursor() as cursor, cursor.copy(f"COPY {table} (id, embedding) FROM STDIN") as copy:
        for i, row in enumerate(rows):
            copy.write_row((i, literal(row)))
    conn.execute(f"ANALYZE {table}")
    # Questions near what was said: a stored vector plus noise.
    queries = rows[rng.integers(0, size, count)] + 0.5 * unit_rows(rng, count)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    search = f"SELECT id FROM {table} ORDER BY embedding <=> %s::vector LIMIT {K}"

    def run(texts: list[str]) -> tuple[list[float], list[list[int]]]:
        samples, found = [], []
        for text in texts:
            start = time.perf_counter()
            found.append([r[0] for r in conn.execute(search, (text,)).fetchall()])
            samples.append((time.perf_counter() - start) * 1000)
        return samples, found

    texts = [literal(q) for q in queries]
    exact_ms, exact = run(texts)
    start = time.perf_counter()
    conn.execute(
        f"CREATE INDEX ON {table} USING hnsw (embedding vector_cosine_ops) "
        "WITH (m = 16, ef_construction = 64)"
    )
    build_s = time.perf_counter() - start
    conn.execute("SET hnsw.ef_search = 40")
    hnsw_ms, approx = run(texts)
    recall = np.mean([len(set(a) & set(e)) / K for a, e in zip(approx, exact, strict=True)])
    conn.execute(f"DROP TABLE {table}")
    return {
        "vectors": size,
        "exact_in_server": summary(exact_ms),
        "hnsw_build_s": round(build_s, 1),
        "hnsw": summary(hnsw_ms),
        "hnsw_recall_at_10": round(float(recall), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,50000,100000")
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    import psycopg

    rng = np.random.default_rng(11)
    results = {}
    with server() as url, psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        for size in (int(s) for s in args.sizes.split(",")):
            results[f"n{size}"] = figures = measure(conn, size, args.queries, rng)
            print(figures, flush=True)
    print("written to", write_results("pgvector_ann", results))


if __name__ == "__main__":
    main()
