"""Where an ANN index takes over from exact search, per namespace size.

Exact: cosine over a float32 matrix with ``np.einsum`` then ``argpartition``
for the top 10, as the store-backed indexes rank (facts/sqlite/vectors.py).
ANN: FAISS ``IndexHNSWFlat`` (M=32, efConstruction 40, efSearch 64, inner
product, one thread). Random unit vectors of 384 dims; p50/p99 per query over
``--queries`` queries, recall@10 of HNSW against exact.

    python bench/ann_crossover.py                     # 10k .. 400k
    python bench/ann_crossover.py --sizes 10000,50000 --queries 100
    python bench/ann_crossover.py --data clustered    # topic clusters, not uniform
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import summary, write_results

DIM = 384
K = 10


def unit_rows(rng: np.random.Generator, count: int) -> np.ndarray:
    rows = rng.standard_normal((count, DIM), dtype=np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def exact_top(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    scores = np.einsum("ij,j->i", matrix, query)
    top = np.argpartition(-scores, K)[:K]
    return top[np.argsort(-scores[top])]


def timed(fn, queries: np.ndarray) -> tuple[list[float], list[np.ndarray]]:
    samples, results = [], []
    for query in queries:
        start = time.perf_counter()
        results.append(fn(query))
        samples.append((time.perf_counter() - start) * 1000)
    return samples, results


def make_matrix(rng: np.random.Generator, size: int, data: str) -> np.ndarray:
    if data == "random":
        return unit_rows(rng, size)
    # Clustered: topics with spread, closer to how sentence embeddings lie than
    # uniform random vectors (on which every neighbour is a near-tie).
    centers = unit_rows(rng, max(size // 100, 10))
    rows = centers[rng.integers(0, len(centers), size)] + 0.6 * unit_rows(rng, size)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def measure(size: int, queries: int, ef_search: int, rng: np.random.Generator, data: str) -> dict:
    import faiss

    matrix = make_matrix(rng, size, data)
    # Queries near stored vectors, as a paraphrase lands near what it recalls.
    targets = rng.integers(0, size, queries)
    picks = matrix[targets] + 0.5 * unit_rows(rng, queries)
    picks /= np.linalg.norm(picks, axis=1, keepdims=True)
    for query in picks[:5]:
        exact_top(matrix, query)
    exact_ms, exact_ids = timed(lambda q: exact_top(matrix, q), picks)

    start = time.perf_counter()
    index = faiss.IndexHNSWFlat(DIM, 32, faiss.METRIC_INNER_PRODUCT)
    index.add(matrix)
    build_s = time.perf_counter() - start
    index.hnsw.efSearch = ef_search
    hnsw_ms, hnsw_ids = timed(lambda q: index.search(q[None, :], K)[1][0], picks)
    recall = np.mean([len(set(a) & set(b)) / K for a, b in zip(exact_ids, hnsw_ids, strict=True)])
    # Did HNSW's top 10 still hold the stored vector the query was made from?
    target_hit = np.mean([t in set(b) for t, b in zip(targets, hnsw_ids, strict=True)])
    return {
        "vectors": size,
        "exact": summary(exact_ms),
        "hnsw": summary(hnsw_ms),
        "hnsw_recall_at_10": round(float(recall), 4),
        "hnsw_target_in_top10": round(float(target_hit), 4),
        "hnsw_build_s": round(build_s, 2),
        "matrix_mb": round(matrix.nbytes / 2**20, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,50000,100000,200000,400000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--ef-search", type=int, default=64)
    parser.add_argument("--data", choices=("random", "clustered"), default="random")
    args = parser.parse_args()

    import faiss

    faiss.omp_set_num_threads(1)  # one query at a time: threads cost more than they save
    rng = np.random.default_rng(14)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        row = measure(size, args.queries, args.ef_search, rng, args.data)
        rows.append(row)
        print(
            f"{size:>7} vectors  exact p50 {row['exact']['p50_ms']:7.2f} ms "
            f"p99 {row['exact']['p99_ms']:7.2f}  |  hnsw p50 {row['hnsw']['p50_ms']:6.3f} ms "
            f"p99 {row['hnsw']['p99_ms']:6.3f}  recall@10 {row['hnsw_recall_at_10']:.3f} "
            f"target {row['hnsw_target_in_top10']:.3f}  "
            f"(build {row['hnsw_build_s']} s)",
            flush=True,
        )
    write_results(
        f"ann_crossover_{args.data}",
        {
            "data": args.data,
            "dimension": DIM,
            "k": K,
            "hnsw": {"M": 32, "efSearch": args.ef_search},
            "cpu_count": os.cpu_count(),
            "loadavg_1m": os.getloadavg()[0],
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
