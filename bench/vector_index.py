"""Store-backed vector index per backend: warm search, a turn (add then search), cold load, keywords.

A turn indexes a *new* chunk (read incrementally by a warm process); replacing an
existing one is measured apart (SQLite reloads the namespace after a removal).

One namespace of N vectors (384 dims, random unit vectors; texts of 12 words
from a 5,000-word vocabulary) in a fresh SQLite file / Postgres table set /
Redis prefix, removed afterwards. ``pgvector`` is Postgres with the extension
(the pgserver wheel's server unless $FASTAIAGENT_TEST_PGVECTOR names one). Postgres and Redis are read from $FASTAIAGENT_TEST_POSTGRES
and $FASTAIAGENT_TEST_REDIS (the test servers by default).

    .venv/bin/python bench/vector_index.py                         # sqlite, 10k and 100k
    .venv/bin/python bench/vector_index.py --backends sqlite,redis --quick
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from _common import summary, time_calls, write_results

from fastaiagent.kb.protocols import Chunk

POSTGRES = os.environ.get("FASTAIAGENT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("FASTAIAGENT_TEST_REDIS", "redis://127.0.0.1:6379/0")
DIM = 384
NS = "user:bench"
Opener = Callable[..., Any]  # opener(**index options) -> a new index on the bench's storage


@contextmanager
def _sqlite() -> Iterator[Opener]:
    from fastaiagent.facts.sqlite.store import SQLiteFactStore
    from fastaiagent.facts.sqlite.vectors import SQLiteVectorIndex

    with tempfile.TemporaryDirectory() as folder:
        stores: list[Any] = []

        def opener(**options: Any) -> Any:
            stores.append(SQLiteFactStore(Path(folder) / "bench.db"))
            return SQLiteVectorIndex(stores[-1], **options)

        yield opener
        for store in stores:
            store.close()


@contextmanager
def _postgres(url: str = POSTGRES) -> Iterator[Opener]:
    import psycopg

    from fastaiagent.facts.postgres.store import PostgresFactStore
    from fastaiagent.facts.postgres.vectors import PostgresVectorIndex

    table = f"bench_vi_{uuid.uuid4().hex[:8]}"
    stores: list[Any] = []

    def opener(**options: Any) -> Any:
        stores.append(PostgresFactStore(url, table=table))
        return PostgresVectorIndex(stores[-1], **options)

    try:
        yield opener
    finally:
        for store in stores:
            store.close()
        with psycopg.connect(url, autocommit=True) as admin:
            for suffix in ("", "_vectors", "_vector_ns", "_embeddings", "_vector_meta", "_vector_terms"):
                admin.execute(f"DROP TABLE IF EXISTS {table}{suffix}")
            admin.execute("DELETE FROM fastaiagent_schema WHERE component LIKE %s", (f"%:{table}%",))


@contextmanager
def _redis() -> Iterator[Opener]:
    import redis

    from fastaiagent.facts.redis.store import RedisFactStore
    from fastaiagent.facts.redis.vectors import RedisVectorIndex

    prefix = f"bench_vi_{uuid.uuid4().hex[:8]}"
    stores: list[Any] = []

    def opener(**options: Any) -> Any:
        stores.append(RedisFactStore(REDIS, prefix=prefix))
        return RedisVectorIndex(stores[-1], **options)

    try:
        yield opener
    finally:
        for store in stores:
            store.close()
        client = redis.Redis.from_url(REDIS)
        keys = list(client.scan_iter(match=prefix + ":*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])
        client.close()


@contextmanager
def _pgvector() -> Iterator[Opener]:
    """Postgres with the pgvector extension: $FASTAIAGENT_TEST_PGVECTOR, else a
    server from the pgserver wheel in a temporary folder."""
    given = os.environ.get("FASTAIAGENT_TEST_PGVECTOR")
    if given:
        with _postgres(given) as opener:
            yield opener
        return
    import pgserver

    with tempfile.TemporaryDirectory() as folder:
        server = pgserver.get_server(folder, cleanup_mode="stop")
        try:
            with _postgres(server.get_uri()) as opener:
                yield opener
        finally:
            server.cleanup()


BACKENDS = {"sqlite": _sqlite, "postgres": _postgres, "pgvector": _pgvector, "redis": _redis}


def _fill(index: Any, n: int, rng: np.random.Generator, words: list[str]) -> float:
    """Add ``n`` chunks in batches of 1000; returns seconds taken."""
    start = time.perf_counter()
    for first in range(0, n, 1000):
        vectors = rng.standard_normal((min(1000, n - first), DIM)).astype("float32")
        index.add([
            Chunk(f"c{first + i}", " ".join(random.choices(words, k=12)), v.tolist(), {"namespace": NS})
            for i, v in enumerate(vectors)
        ])
    return time.perf_counter() - start


def _measure(opener: Opener, n: int, count: int) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    random.seed(7)
    words = [f"w{i}" for i in range(5000)]
    index = opener()
    fill_s = _fill(index, n, rng, words)
    queries = rng.standard_normal((64, DIM)).astype("float32").tolist()
    cold = []
    for query in queries[:5]:  # a new object each: what a restarted process pays first
        fresh = opener()
        start = time.perf_counter()
        fresh.search(query, 10, namespace=NS)
        cold.append((time.perf_counter() - start) * 1000)
    cold_ms = sorted(cold)[2]
    index.search(queries[0], 10, namespace=NS)
    holds_copy = getattr(index, "holds_copy", None)  # pgvector: the copy loads in the background
    while holds_copy is not None and not holds_copy(NS):
        time.sleep(0.05)
    warm = time_calls(lambda i: index.search(queries[i % 64], 10, namespace=NS), count, warmup=20)

    fresh_ids = itertools.count()  # time_calls repeats i after its warm-up: an id is new once

    def turn(i: int) -> None:  # index one new message, then recall
        chunk = Chunk(f"t{next(fresh_ids)}", "a new message", queries[(i + 1) % 64], {"namespace": NS})
        index.add([chunk])
        index.search(queries[i % 64], 10, namespace=NS)

    after_write = time_calls(turn, count // 2, warmup=5)
    add_one = time_calls(
        lambda i: index.add([Chunk(f"a{next(fresh_ids)}", "one more", queries[i % 64], {"namespace": NS})]),
        count // 2,
        warmup=5,
    )

    def upsert(i: int) -> None:  # replace an existing chunk (a removal: the copy is reloaded)
        index.add([Chunk(f"c{i}", "edited", queries[i % 64], {"namespace": NS})])
        index.search(queries[i % 64], 10, namespace=NS)

    after_upsert = time_calls(upsert, 10, warmup=1)
    phrases = [" ".join(random.choices(words, k=3)) for _ in range(64)]
    keyword = time_calls(lambda i: index.keyword_search(phrases[i % 64], 10, namespace=NS), count, 20)
    uncached = opener(cache_bytes=1)  # no namespace fits: every search reads it
    no_cache = time_calls(lambda i: uncached.search(queries[i % 64], 10, namespace=NS), 5, 1)
    return {
        "vectors": n,
        "fill_s": round(fill_s, 2),
        "cold_search_ms_p50": round(cold_ms, 1),
        "warm_search": summary(warm),
        "add_then_search": summary(after_write),
        "add_one": summary(add_one),
        "upsert_then_search": summary(after_upsert),
        "keyword_search": summary(keyword),
        "search_without_memory_cache": summary(no_cache),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sqlite", help="comma-separated: sqlite, postgres, pgvector, redis")
    parser.add_argument("--quick", action="store_true", help="10k vectors only")
    parser.add_argument("--count", type=int, default=200, help="timed searches per figure")
    args = parser.parse_args()
    sizes = (10_000,) if args.quick else (10_000, 100_000)
    results: dict[str, Any] = {}
    for backend in args.backends.split(","):
        if backend not in BACKENDS:
            parser.error(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
        for n in sizes:
            with BACKENDS[backend]() as opener:
                results[f"{backend}_n{n}"] = figures = _measure(opener, n, args.count)
            print(backend, n, figures, flush=True)
    name = "vector_index" + ("_quick" if args.quick else "")
    print("written to", write_results(name, results))


if __name__ == "__main__":
    main()
