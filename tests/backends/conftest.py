"""Real servers for the backend tests: Postgres and Redis on localhost.

A missing server skips these tests on a laptop but FAILS them in CI (CI=true),
so a broken service never passes silently.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from _env import (
    POSTGRES_URL,
    REDIS_URL,
    drop_prefix,
    drop_tables,
    require_postgres,
    require_redis,
    start_pgvector_server,
)

RUN_ID = uuid.uuid4().hex[:8]
# Tables a fact store creates beside its own (windows, items, vectors, embeddings).
COMPANIONS = ("windows", "items", "vectors", "vector_ns", "vector_meta", "embeddings")  # keeps tables and keys apart from other people's runs


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The test Postgres URL, checked once per session (skips, or fails under CI=true)."""
    return require_postgres(POSTGRES_URL)


@pytest.fixture(scope="session")
def pgvector_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Postgres with pgvector (the pgserver wheel's), started once per session."""
    url, server = start_pgvector_server(tmp_path_factory.mktemp("pgvector"))
    yield url
    if server is not None:
        server.cleanup()  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The test Redis URL, checked once per session (skips, or fails under CI=true)."""
    return require_redis(REDIS_URL)


def forget_schema_rows(url: str, table: str) -> None:
    """Delete the schema-version rows of ``table`` and its companions."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        exists = conn.execute("SELECT to_regclass('fastaiagent_schema')").fetchone()
        if exists and exists[0]:
            conn.execute(
                "DELETE FROM fastaiagent_schema WHERE component LIKE %s", (f"%:{table}%",)
            )


def unique_name(kind: str) -> str:
    """A table name / key prefix no other test run uses."""
    return f"fa_{kind}_{RUN_ID}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def pg_table(postgres_url: str) -> Iterator[str]:
    """A fresh table name, dropped afterwards with every companion table a store
    makes beside it (windows, items, vectors) and their schema-version rows."""
    table = unique_name("lm")
    yield table
    drop_tables(postgres_url, table, *(f"{table}_{suffix}" for suffix in COMPANIONS))
    forget_schema_rows(postgres_url, table)


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A fresh key prefix, deleted afterwards."""
    prefix = unique_name("mem")
    yield prefix
    drop_prefix(redis_url, prefix)
