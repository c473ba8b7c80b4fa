"""Shared fixtures: every test gets its own local database path, and the run as a
whole leaves the default locations as it found them (tests/_guard.py)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from _env import (
    POSTGRES_URL,
    REDIS_URL,
    destroy_postgres,
    destroy_redis,
    postgres_location,
    redis_location,
    require_postgres,
    require_redis,
    start_redis_server,
    unique_name,
)
from _guard import _guard_each_test, pytest_report_header, pytest_sessionfinish, pytest_sessionstart
from _process_state import before_teardown, reset

__all__ = ["_guard_each_test", "pytest_report_header", "pytest_sessionfinish", "pytest_sessionstart"]

# The ONNX graph of the local embedder is exported once into a cache of the tests'
# own (kept between runs: the export takes ~10 s), never the user's ~/.cache;
# subprocesses the tests start inherit it.
os.environ["FASTAIAGENT_CACHE_DIR"] = str(Path(tempfile.gettempdir()) / f"fastaiagent-test-cache-{os.getuid()}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Each test starts with a fresh process's state (tests/_process_state.py)."""
    reset()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Pauses lifted and background jobs stopped before the fixtures are torn down
    (their destroy() must reach the server and stay done), the rest after."""
    before_teardown()
    try:
        return (yield)
    finally:
        reset()


@pytest.fixture(autouse=True)
def _isolated_local_db(tmp_path, monkeypatch):
    """Point the default SQLite location at a per-test file, and keep cwd clean."""
    monkeypatch.setenv("FASTAIAGENT_LOCAL_DB", str(tmp_path / "local.db"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    yield


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The test Postgres URL, checked once per test process (skips, or fails under CI=true)."""
    return require_postgres(POSTGRES_URL)


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The test Redis URL, checked once per test process (skips, or fails under CI=true)."""
    return require_redis(REDIS_URL)


@pytest.fixture
def pg_table(postgres_url: str) -> Iterator[str]:
    """A fresh table name of this test's own; afterwards a store on it is destroyed
    (its table, windows, items, vectors of every size, schema-version rows). A
    store the test makes on another name is the test's to destroy (the guard
    fails a test that leaves one behind)."""
    table = unique_name("lm")
    yield table
    destroy_postgres(postgres_url, table)


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A fresh key prefix of this test's own; afterwards a store under it is
    destroyed (every key ``<prefix>:*``)."""
    prefix = unique_name("mem")
    yield prefix
    destroy_redis(redis_url, prefix)


@pytest.fixture
def own_location(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """``own_location(backend)``: a location string (``sqlite`` / ``postgres`` /
    ``redis``) whose table, key prefix or file belongs to this test alone, for
    code that takes a location string (subprocesses, the CLI, examples). Whatever
    the stores made there is removed afterwards."""
    made: list[tuple[str, str, str]] = []

    def make(backend: str) -> str:
        name = unique_name("loc")
        if backend == "sqlite":
            return f"sqlite:///{tmp_path / name}.db"
        if backend == "postgres":
            url = require_postgres(POSTGRES_URL)
            made.append((backend, url, name))
            return postgres_location(url, name)
        if backend == "redis":
            url = require_redis(REDIS_URL)
            made.append((backend, url, name))
            return redis_location(url, name)
        raise ValueError(f"unknown backend {backend!r}")

    yield make
    for backend, url, name in made:
        if backend == "postgres":
            destroy_postgres(url, name)
        else:
            destroy_redis(url, name)


@pytest.fixture(scope="session")
def own_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Redis server of this test process's own (a free port), for tests that change
    server-wide state: SCRIPT FLUSH, the slow log, CONFIG SET. Never the shared one."""
    url, process = start_redis_server(tmp_path_factory.mktemp("redis"))
    yield url
    process.terminate()
    process.wait(timeout=10)
