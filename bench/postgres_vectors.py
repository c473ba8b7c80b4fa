"""Postgres vector index: warm search, search after a write, cold load, keyword search.

One namespace of N vectors (384 dims, random unit vectors; texts of 12 words from
a 5,000-word vocabulary) in a fresh table set, dropped afterwards. Needs the
Postgres at $FASTAIAGENT_TEST_POSTGRES (default postgresql://postgres@127.0.0.1:5432/test).

    .venv/bin/python bench/postgres_vectors.py            # 10k and 100k
    .venv/bin/python bench/postgres_vectors.py --quick    # 10k only
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import psycopg

sys.path.insert(0, str(Path(__file__).parent))
from _common import summary, time_calls, write_results

from fastaiagent.facts.postgres import PostgresFactStore
from fastaiagent.facts.postgres_vectors import PostgresVectorIndex
from fastaiagent.kb.protocols import Chunk

URL = os.environ.get("FASTAIAGENT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
DIM = 384
NS = "user:bench"
SUFFIXES = ("", "_vectors", "_vector_ns", "_embeddings", "_vector_meta")


def _fill(index: PostgresVectorIndex, n: int, rng: np.random.Generator, words: list[str]) -> float:
    """Add ``n`` chunks in batches of 1000; returns seconds taken."""
    start = time.perf_counter()
    for first in range(0, n, 1000):
        vectors = rng.standard_normal((min(1000, n - first), DIM)).astype("float32")
        index.add([
            Chunk(f"c{first + i}", " ".join(random.choices(words, k=12)), v.tolist(), {"namespace": NS})
            for i, v in enumerate(vectors)
        ])
    return time.perf_counter() - start


def _run(n: int, count: int) -> dict[str, object]:
    table = f"bench_pgv_{uuid.uuid4().hex[:8]}"
    facts = PostgresFactStore(URL, table=table)
    rng = np.random.default_rng(7)
    random.seed(7)
    words = [f"w{i}" for i in range(5000)]
    try:
        index = PostgresVectorIndex(facts)
        fill_s = _fill(index, n, rng, words)
        queries = rng.standard_normal((64, DIM)).astype("float32").tolist()
        start = time.perf_counter()
        index.search(queries[0], 10, namespace=NS)  # loads the namespace into memory
        cold_ms = (time.perf_counter() - start) * 1000
        warm = time_calls(lambda i: index.search(queries[i % 64], 10, namespace=NS), count, warmup=20)

        def write_then_search(i: int) -> None:  # a turn: index one message, then recall
            index.add([Chunk(f"t{i}", "a new message", queries[(i + 1) % 64], {"namespace": NS})])
            index.search(queries[i % 64], 10, namespace=NS)

        after_write = time_calls(write_then_search, count // 2, warmup=5)
        add_one = time_calls(
            lambda i: index.add([Chunk(f"a{i}", "one more", queries[i % 64], {"namespace": NS})]),
            count // 2,
            warmup=5,
        )
        phrases = [" ".join(random.choices(words, k=3)) for _ in range(64)]
        keyword = time_calls(lambda i: index.keyword_search(phrases[i % 64], 10, namespace=NS), count, 20)
        uncached = PostgresVectorIndex(PostgresFactStore(URL, table=table), cache_bytes=0)
        no_cache = time_calls(lambda i: uncached.search(queries[i % 64], 10, namespace=NS), 5, 1)
        uncached.store.close()
        return {
            "vectors": n,
            "fill_s": round(fill_s, 2),
            "cold_search_ms": round(cold_ms, 1),
            "warm_search": summary(warm),
            "add_then_search": summary(after_write),
            "add_one": summary(add_one),
            "keyword_search": summary(keyword),
            "search_without_memory_cache": summary(no_cache),
        }
    finally:
        facts.close()
        with psycopg.connect(URL, autocommit=True) as admin:
            for suffix in SUFFIXES:
                admin.execute(f"DROP TABLE IF EXISTS {table}{suffix}")
            admin.execute(
                "DELETE FROM fastaiagent_schema WHERE component LIKE %s", (f"%:{table}%",)
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10k vectors only")
    parser.add_argument("--count", type=int, default=200, help="timed searches per figure")
    args = parser.parse_args()
    results = {f"n{n}": _run(n, args.count) for n in ((10_000,) if args.quick else (10_000, 100_000))}
    for name, figures in results.items():
        print(name, figures)
    print("written to", write_results("postgres_vectors" + ("_quick" if args.quick else ""), results))


if __name__ == "__main__":
    main()
