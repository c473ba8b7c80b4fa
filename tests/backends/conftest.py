"""Real servers for the backend tests: Postgres and Redis on localhost (the shared
fixtures ``postgres_url``, ``redis_url``, ``pg_table`` and ``redis_prefix`` are in
tests/conftest.py), and a Postgres with pgvector started for this run.

A missing server skips these tests on a laptop but FAILS them in CI (CI=true),
so a broken service never passes silently.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from _env import RedisCluster, start_pgbouncer, start_pgvector_server, start_redis_cluster


@pytest.fixture(scope="session")
def pgvector_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Postgres with pgvector (the pgserver wheel's), started once per test process."""
    url, server = start_pgvector_server(tmp_path_factory.mktemp("pgvector"))
    yield url
    if server is not None:
        server.cleanup()  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def pgbouncer_url(postgres_url: str) -> Iterator[str]:
    """The test Postgres behind a PgBouncer in transaction pooling mode, started once
    per test process; a store reaches it with ``pooler="transaction"``."""
    url, process, folder = start_pgbouncer(postgres_url)
    yield url
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:  # still waiting on a client: it goes anyway
        process.kill()
        process.wait()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """A Redis Cluster of three primaries with a replica each, started once per test
    process on free ports (no persistence); killed at the end. Tests share it, each
    under its own prefix."""
    cluster = start_redis_cluster(tmp_path_factory.mktemp("redis-cluster"))
    yield cluster
    cluster.stop()


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def any_location(request: Any, own_location: Any) -> str:
    """A location string of this test's own on each backend in turn (SQLite file,
    Postgres table, Redis prefix), for code that takes a location."""
    return str(own_location(request.param))
