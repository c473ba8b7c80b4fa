"""RedisVectorIndex: warm vector search and keyword search at 10k / 100k chunks.

One namespace of ``size`` chunks (384-dim random vectors, 12-word texts over a
5,000-word vocabulary), then:

- ``add``: chunks per second, in script calls of 500;
- ``cold_search``: the first search of a process (reads the namespace's vectors);
- ``warm_search``: searches with nothing written between (one catch-up call + matmul);
- ``search_after_write``: another process adds one chunk before each search (the
  catch-up brings one vector);
- ``keyword_search``: three-word queries (reads those terms' postings only).

Run: ``.venv/bin/python bench/redis_vectors.py [--sizes 10000 100000] [--url ...]``.
Writes ``bench/results/redis_vectors.json``; the keys go afterwards.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import summary, write_results

from fastaiagent.facts.redis.store import RedisFactStore
from fastaiagent.kb.protocols import Chunk

DIM, NS, VOCAB = 384, "user:bench", [f"word{n}" for n in range(5000)]


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(12))


def _fill(index: object, size: int, rng: random.Random) -> float:
    vectors = np.random.default_rng(1).standard_normal((size, DIM)).astype(np.float32)
    start = time.perf_counter()
    for lo in range(0, size, 500):
        batch = [
            Chunk(f"c{n}", _text(rng), vectors[n].tolist(), {"namespace": NS})
            for n in range(lo, min(size, lo + 500))
        ]
        index.add(batch)  # type: ignore[attr-defined]
    return size / (time.perf_counter() - start)


def _timed(fn: object, count: int) -> list[float]:
    samples = []
    for i in range(count):
        start = time.perf_counter()
        fn(i)  # type: ignore[operator]
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def run(url: str, size: int, count: int) -> dict[str, object]:
    prefix = f"bench_vec_{uuid.uuid4().hex[:8]}"
    store, writer_store = RedisFactStore(url, prefix=prefix), RedisFactStore(url, prefix=prefix)
    rng = random.Random(7)
    try:
        index, writer = store.vector_store(), writer_store.vector_store()
        rate = _fill(writer, size, rng)
        queries = np.random.default_rng(2).standard_normal((count, DIM)).astype(np.float32)
        q = [row.tolist() for row in queries]
        start = time.perf_counter()
        index.search(q[0], 5, namespace=NS)
        cold = (time.perf_counter() - start) * 1000
        for i in range(20):
            index.search(q[i], 5, namespace=NS)
        warm = _timed(lambda i: index.search(q[i], 5, namespace=NS), count)

        extra = [Chunk(f"x{i}", _text(rng), q[i], {"namespace": NS}) for i in range(count)]
        after = []
        for i in range(count):
            writer.add([extra[i]])
            after += _timed(lambda _, i=i: index.search(q[i], 5, namespace=NS), 1)
        words = [" ".join(rng.choice(VOCAB) for _ in range(3)) for _ in range(count)]
        keyword = _timed(lambda i: index.keyword_search(words[i], 10, namespace=NS), count)
        return {
            "size": size,
            "dim": DIM,
            "add_per_s": round(rate),
            "cold_search_ms": round(cold, 2),
            "warm_search": summary(warm),
            "search_after_write": summary(after),
            "keyword_search": summary(keyword),
        }
    finally:
        store.vector_store().delete_namespace(NS)
        for key in store.client.scan_iter(match=prefix + ":*", count=1000):
            store.client.delete(key)
        store.close()
        writer_store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--count", type=int, default=200, help="timed calls per measure")
    args = parser.parse_args()
    results = [run(args.url, size, args.count) for size in args.sizes]
    for row in results:
        print(row)
    print(write_results("redis_vectors", {"runs": results}))


if __name__ == "__main__":
    main()
