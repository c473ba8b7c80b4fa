"""The StoredVectorIndex conformance suite on every backend: SQLite, the real Postgres, the real Redis.

Adding a backend is one branch of ``open_index``. A backend whose module does
not exist yet is skipped with the reason; once it exists, a missing server
fails the run under CI=true (``require_postgres`` / ``require_redis``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from _env import require_module
from fastaiagent.facts.conformance import StoredVectorIndexConformance

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("pgvector", id="pgvector", marks=pytest.mark.postgres),
    pytest.param("pgbouncer", id="pgbouncer", marks=pytest.mark.postgres),
    pytest.param("redis", id="redis", marks=pytest.mark.redis),
]


def _backend_module(name: str) -> Any:
    """The backend's vector module (a missing driver fails under CI, skips elsewhere)."""
    for driver in {"postgres": ["psycopg"], "redis": ["redis"]}.get(name, []):
        require_module(driver)
    return importlib.import_module(f"fastaiagent.facts.{name}.vectors")


def _sqlite(request: pytest.FixtureRequest, stores: list[Any], cleanups: list[Callable[[], None]]) -> Callable[[], Any]:
    from fastaiagent.facts.sqlite.store import SQLiteFactStore

    _backend_module("sqlite")
    path = request.getfixturevalue("tmp_path") / "memory.db"

    def opener() -> Any:
        stores.append(SQLiteFactStore(path))
        return stores[-1].vector_store()

    return opener


def _postgres(
    request: pytest.FixtureRequest,
    stores: list[Any],
    cleanups: list[Callable[[], None]],
    server: str = "postgres_url",
) -> Callable[[], Any]:
    _backend_module("postgres")
    from fastaiagent.facts.postgres.store import PostgresFactStore

    url, table = request.getfixturevalue(server), request.getfixturevalue("pg_table")
    pgvector = server == "pgvector_url"
    pooler = "transaction" if server == "pgbouncer_url" else None

    def opener() -> Any:
        stores.append(PostgresFactStore(url, max_pool_size=4, table=table, pooler=pooler))
        index = stores[-1].vector_store()
        assert index.uses_pgvector is pgvector  # the extension is used exactly when present
        return index

    return opener


def _redis(request: pytest.FixtureRequest, stores: list[Any], cleanups: list[Callable[[], None]]) -> Callable[[], Any]:
    _backend_module("redis")
    from fastaiagent.facts.redis.store import RedisFactStore

    url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")

    def opener() -> Any:
        stores.append(RedisFactStore(url, prefix=prefix))
        return stores[-1].vector_store()

    return opener



def _pgvector(request: pytest.FixtureRequest, stores: list[Any], cleanups: list[Callable[[], None]]) -> Callable[[], Any]:
    return _postgres(request, stores, cleanups, server="pgvector_url")


def _pgbouncer(request: pytest.FixtureRequest, stores: list[Any], cleanups: list[Callable[[], None]]) -> Callable[[], Any]:
    return _postgres(request, stores, cleanups, server="pgbouncer_url")


OPENERS = {"sqlite": _sqlite, "postgres": _postgres, "pgvector": _pgvector, "pgbouncer": _pgbouncer, "redis": _redis}


class TestStoredVectorIndex(StoredVectorIndexConformance):
    @pytest.fixture(params=BACKENDS)
    def open_index(self, request: pytest.FixtureRequest) -> Iterator[Callable[[], Any]]:
        stores: list[Any] = []
        cleanups: list[Callable[[], None]] = []
        yield OPENERS[request.param](request, stores, cleanups)
        if stores:  # all on one location (on the pgvector server too)
            stores[0].destroy()
        for store in stores:
            store.close()
        for cleanup in cleanups:
            cleanup()
