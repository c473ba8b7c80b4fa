"""One fresh fact store per test on each backend: SQLite (a temp file), Postgres
(its own tables) and Redis (its own key prefix). A missing server skips on a
laptop and fails under CI=true (see tests/_env.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _env import POSTGRES_URL, REDIS_URL, require_postgres, require_redis, unique_name

BACKENDS = ("sqlite", "postgres", "redis")


def make_store(backend: str, tmp_path: Path, cleanups: list[Any]) -> Any:
    """A new fact store on ``backend``; ``cleanups`` collects what removes its data."""
    name = unique_name("int")
    if backend == "sqlite":
        from fastaiagent.facts.sqlite.store import SQLiteFactStore

        return SQLiteFactStore(tmp_path / f"{name}.db")
    if backend == "postgres":
        from fastaiagent.facts.postgres.store import PostgresFactStore

        url = require_postgres(POSTGRES_URL)
        store = PostgresFactStore(url, table=name)
    else:
        from fastaiagent.facts.redis.store import RedisFactStore

        store = RedisFactStore(require_redis(REDIS_URL), prefix=name)
    cleanups.append(store.close)
    cleanups.append(store.destroy)  # run in reverse: destroyed, then closed
    return store


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The name of the backend under test."""
    return str(request.param)


@pytest.fixture
def fact_store(backend: str, tmp_path: Path) -> Iterator[Any]:
    """A fresh fact store on the backend under test, its data removed afterwards."""
    cleanups: list[Any] = []
    yield make_store(backend, tmp_path, cleanups)
    for cleanup in reversed(cleanups):
        cleanup()


@pytest.fixture
def postgres_fact_store(tmp_path: Path) -> Iterator[Any]:
    """A fresh Postgres fact store (its own tables)."""
    cleanups: list[Any] = []
    yield make_store("postgres", tmp_path, cleanups)
    for cleanup in reversed(cleanups):
        cleanup()


@pytest.fixture
def redis_fact_store(tmp_path: Path) -> Iterator[Any]:
    """A fresh Redis fact store (its own key prefix)."""
    cleanups: list[Any] = []
    yield make_store("redis", tmp_path, cleanups)
    for cleanup in reversed(cleanups):
        cleanup()
