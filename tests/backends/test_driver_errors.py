"""No driver error leaves a store: every failure of SQLite, Redis or Postgres comes out
as one of the library's errors, classified, naming the file or URL and the fix, with
the driver's error as ``__cause__`` (issue #31).

- damaged data -> StoreCorruptError (a file of garbage, malformed pages, a key of
  another type, a dropped table);
- the configuration -> StoreConfigError (a Redis DB index out of range, a missing
  Postgres database, something other than Redis at the address);
- the rest -> StoreUnavailableError (a full disk, a lock held too long, nothing
  listening).

Real files and servers throughout. Each test checks the type of the raised error
itself, not only its cause.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from _env import free_port, require_module
from fastaiagent.errors import (
    FastAIAgentError,
    StoreConfigError,
    StoreCorruptError,
    StoreUnavailableError,
)
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.items import ItemWrite
from fastaiagent.facts.sqlite.store import SQLiteFactStore
from fastaiagent.facts.windows import WindowKey
from fastaiagent.kb.protocols import Chunk
from fastaiagent.trace.store import SpanRecord, TraceStore


def driver_errors() -> tuple[type[BaseException], ...]:
    found: list[type[BaseException]] = [sqlite3.Error]
    for module, name in (("redis", "RedisError"), ("psycopg", "Error")):
        with contextlib.suppress(ImportError):
            found.append(getattr(__import__(module), name))
    return tuple(found)


DRIVER_ERRORS = driver_errors()
KEY = WindowKey("agent", "", "alice")


def raised(call: Callable[[], Any], *, caused: bool = True) -> BaseException:
    """The error ``call`` raises: the library's own, caused by a driver's (``caused``;
    a call while the server is paused raises without asking the driver)."""
    with pytest.raises(FastAIAgentError) as info:
        call()
    error = info.value
    assert not isinstance(error, DRIVER_ERRORS), type(error).__mro__
    if caused:
        assert isinstance(error.__cause__, DRIVER_ERRORS), repr(error)
    return error


def fact(text: str = "Alice likes tea", user: str = "alice") -> Fact:
    return Fact(text, "user", user)


def store_verbs(store: Any) -> dict[str, Callable[[], Any]]:
    """One call of each kind on a fact store and the stores that share its connections."""
    windows, items = store.window_store(), store.item_store()
    return {
        "add": lambda: store.add(fact()),
        "get": lambda: store.get(1),
        "list_active": lambda: store.list_active("user", "alice"),
        "delete": lambda: store.delete("user", "alice"),
        "subjects": lambda: store.subjects(),
        "window load": lambda: windows.load(KEY),
        "window save": lambda: windows.save(KEY, "{}", None, None),
        "item write": lambda: items.write([ItemWrite(("docs",), "k", '{"a": 1}')]),
        "item get": lambda: items.get(("docs",), ["k"]),
    }


# -- SQLite ----------------------------------------------------------------------------------------


@pytest.fixture
def garbage(tmp_path: Path) -> Path:
    path = tmp_path / "garbage.db"
    path.write_bytes(os.urandom(16384))
    return path


def test_a_file_of_garbage_is_a_corrupt_store_naming_the_file(garbage):
    store = SQLiteFactStore(garbage)
    try:
        for verb, call in store_verbs(store).items():
            error = raised(call)
            assert isinstance(error, StoreCorruptError), (verb, error)
            assert str(garbage) in str(error) and "backup" in str(error), verb
            assert isinstance(error.__cause__, sqlite3.DatabaseError)
    finally:
        store.close()


def test_the_vector_index_on_a_file_of_garbage_is_corrupt_too(garbage):
    require_module("numpy")
    store = SQLiteFactStore(garbage)
    try:
        index = store.vector_store()
        for call in (
            lambda: index.add([Chunk("c1", "tea", [1.0, 0.0], {"namespace": "n"})]),
            lambda: index.count(),
            lambda: index.get(["c1"]),
        ):
            assert isinstance(raised(call), StoreCorruptError)
    finally:
        store.close()


def test_a_trace_file_of_garbage_is_corrupt_naming_the_file(garbage):
    traces = TraceStore(garbage)
    span = SpanRecord("00000000000000aa", "t1", None, "run", 1, 2)
    try:
        for call in (lambda: traces.write([span]), traces.count_runs, lambda: traces.get_trace("t1")):
            error = raised(call)
            assert isinstance(error, StoreCorruptError) and str(garbage) in str(error)
    finally:
        traces.close()


def damaged_fact_pages(path: Path) -> None:
    """A store file with facts whose table and index root pages are overwritten:
    the file opens (header and schema are intact), reading the facts fails."""
    store = SQLiteFactStore(path)
    for i in range(500):
        store.add(fact(f"fact number {i} " + "x" * 100, f"u{i % 7}"))
    store.window_store().save(KEY, "{}", None, None)
    store.close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = conn.execute("PRAGMA page_size").fetchone()[0]
    roots = [r for (r,) in conn.execute(
        "SELECT rootpage FROM sqlite_master WHERE tbl_name = 'learned_memory' AND rootpage > 1"
    )]  # fmt: skip
    conn.close()
    with open(path, "r+b") as f:
        for root in roots:
            f.seek((root - 1) * size)
            f.write(b"\xff" * size)


def test_malformed_pages_are_corrupt_on_reads_and_writes(tmp_path):
    path = tmp_path / "damaged.db"
    damaged_fact_pages(path)
    store = SQLiteFactStore(path)
    try:
        for call in (
            lambda: store.list_active("user", "u1"),
            lambda: store.get(5),
            lambda: store.subjects(),
            lambda: store.add(fact("new", "u3")),
        ):
            error = raised(call)
            assert isinstance(error, StoreCorruptError) and str(path) in str(error)
            assert "malformed" in str(error)
        assert store.window_store().load(KEY) is not None  # the rest of the file still reads
    finally:
        store.close()


def test_a_full_disk_is_unavailable_writes_nothing_and_the_store_recovers(tmp_path):
    path = tmp_path / "full.db"
    store = SQLiteFactStore(path)
    try:
        store.add(fact("first"))
        conn = store._connection()  # this thread's connection: the file's size limit is its own
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages + 2}")
        big = "y" * 9_000  # more than two pages
        for call in (
            lambda: store.add(fact(big)),
            lambda: store.window_store().save(KEY, big, None, None),
            lambda: store.item_store().write([ItemWrite(("docs",), "k", f'"{big}"')]),
        ):
            error = raised(call)
            assert isinstance(error, StoreUnavailableError), error
            assert str(path) in str(error) and "is full" in str(error) and "free space" in str(error)
        assert not conn.in_transaction  # rolled back, not left open
        assert [f.fact for f in store.list_active("user", "alice")] == ["first"]
        conn.execute("PRAGMA max_page_count = 1073741823")
        store.add(fact("after"))  # the connection is still usable
        assert [f.fact for f in store.list_active("user", "alice")] == ["after", "first"]
    finally:
        store.close()


def test_a_lock_held_past_the_timeout_is_unavailable(tmp_path):
    path = tmp_path / "locked.db"
    SQLiteFactStore(path).add(fact())
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    store = SQLiteFactStore(path, timeout=0.2)
    try:
        error = raised(lambda: store.add(fact("another")))
        assert isinstance(error, StoreUnavailableError) and "locked" in str(error)
        assert str(path) in str(error) and "timeout" in str(error)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        store.close()


# -- Redis -----------------------------------------------------------------------------------------


@pytest.fixture
def http_port() -> Iterator[int]:
    """A tiny HTTP server on a free port (something that is not Redis)."""

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.mark.redis
def test_a_redis_db_index_out_of_range_is_a_config_error_naming_the_url(redis_url, redis_prefix):
    require_module("redis")
    from fastaiagent.facts.redis.store import RedisFactStore

    url = redis_url.rsplit("/", 1)[0] + "/99"
    store = RedisFactStore(url, prefix=redis_prefix)
    try:
        for verb, call in store_verbs(store).items():
            error = raised(call)
            assert isinstance(error, StoreConfigError), (verb, error)
            assert url in str(error) and "DB index" in str(error), (verb, error)
    finally:
        store.close()


@pytest.mark.redis
def test_a_redis_url_at_an_http_server_is_a_config_error_never_paused(http_port, redis_prefix):
    require_module("redis")
    from fastaiagent.facts import outage
    from fastaiagent.facts.redis.store import RedisFactStore

    url = f"redis://127.0.0.1:{http_port}/0"
    store = RedisFactStore(url, prefix=redis_prefix, socket_timeout=5.0)
    try:
        error = raised(lambda: store.get(1))
        assert isinstance(error, StoreConfigError) and not isinstance(error, StoreUnavailableError)
        assert url in str(error) and "does not answer as Redis" in str(error)
        # Waiting does not fix it: the server is not paused, every call says why again.
        assert not [target for target in outage.paused() if f":{http_port}/" in target]
        later = raised(lambda: store.window_store().load(KEY))
        assert isinstance(later, StoreConfigError) and "does not answer as Redis" in str(later)
    finally:
        store.close()


@pytest.mark.redis
def test_a_key_of_another_type_under_the_prefix_is_corrupt(redis_url, redis_prefix):
    redis = require_module("redis")
    from fastaiagent.facts.redis.store import RedisFactStore

    stray = redis.Redis.from_url(redis_url)
    stray.hset(f"{redis_prefix}:layout", "not", "a string")  # another program's key
    stray.close()
    store = RedisFactStore(redis_url, prefix=redis_prefix)
    try:
        error = raised(lambda: store.get(1))
        assert isinstance(error, StoreCorruptError) and "prefix" in str(error)
        assert redis_url in str(error)
    finally:
        store.close()


# -- Postgres --------------------------------------------------------------------------------------


@pytest.mark.postgres
def test_postgres_with_nothing_listening_is_unavailable():
    require_module("psycopg")
    from fastaiagent.facts.postgres.store import PostgresFactStore

    url = f"postgresql://postgres:secret@127.0.0.1:{free_port()}/test"
    store = PostgresFactStore(url, connect_timeout=2)
    try:
        first = raised(lambda: store.get(1))
        paused = raised(lambda: store.add(fact()), caused=False)  # the server is paused now
        for error in (first, paused):
            assert isinstance(error, StoreUnavailableError)
            assert "secret" not in str(error) and "127.0.0.1" in str(error)
    finally:
        store.close()


@pytest.mark.postgres
def test_a_missing_postgres_database_is_a_config_error(postgres_url):
    require_module("psycopg")
    from fastaiagent.facts.postgres.store import PostgresFactStore

    url = postgres_url.rsplit("/", 1)[0] + "/fa_no_such_database"
    store = PostgresFactStore(url, connect_timeout=2)
    try:
        error = raised(lambda: store.get(1))
        assert isinstance(error, StoreConfigError) and "fa_no_such_database" in str(error)
        assert "the URL's user, password and database" in str(error)
    finally:
        store.close()


@pytest.mark.postgres
def test_a_table_dropped_behind_the_store_is_corrupt(postgres_url, pg_table):
    psycopg = require_module("psycopg")
    from fastaiagent.facts.postgres.store import PostgresFactStore

    store = PostgresFactStore(postgres_url, table=pg_table)
    try:
        store.add(fact())
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f'DROP TABLE "{pg_table}" CASCADE')
        for call in (lambda: store.list_active("user", "alice"), lambda: store.add(fact("x"))):
            error = raised(call)
            assert isinstance(error, StoreCorruptError) and pg_table in str(error)
    finally:
        store.close()
