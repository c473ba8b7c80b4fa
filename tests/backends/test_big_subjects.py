"""Huge users on every backend: forget in bounded steps, one fact by index, bounded reads.

Each backend gets a 100k-fact user, bulk-loaded in the store's own layout (not
through ``add``), and SQLite a 1M-fact one:

- ``forget`` of the whole user completes while a second client keeps getting
  answers within 50 ms (Redis PING, Postgres SELECT 1, SQLite a read and a
  write from another connection): no single step holds the server or the
  database lock for long;
- a process killed (SIGKILL) in the middle of that delete leaves a state that
  a repeat finishes, and the repeat's count is exactly what was left;
- ``update(new, old=<text>)``, ``forget(fact=<text>)`` and the default
  ``retrieve()`` page never read the whole user: they take milliseconds and
  never call ``list_active`` over the subject.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from _wait import wait_until
from fastaiagent import Memory
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.scoping import normalize_text
from fastaiagent.facts.sqlite.store import SQLiteFactStore
from fastaiagent.facts.store import DEFAULT_LIMIT, FactStore

BIG = "big"
MAX_PROBE_MS = 50.0
REPO = Path(__file__).resolve().parents[2]


def text_of(n: int) -> str:
    return f"Fact {n} about the big user"


# -- a second client, timed in a thread ------------------------------------------


class Probe:
    """Calls ``call`` in a loop on its own thread (its own connection) and keeps
    the longest round trip, so a test can assert the server kept answering."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.call = call
        self.longest_ms = 0.0
        self.calls = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                self.call()
            except BaseException as exc:  # reported by the test, never swallowed
                self.errors.append(exc)
                return
            self.longest_ms = max(self.longest_ms, (time.perf_counter() - started) * 1000)
            self.calls += 1
            self._stop.wait(0.001)  # pacing, so the probe does not hog a core

    def __enter__(self) -> Probe:
        self._thread.start()
        wait_until(lambda: self.calls > 0 or self.errors, "the probe answers once")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


# -- bulk loads (the store's own layout) -----------------------------------------


def load_sqlite(store: SQLiteFactStore, count: int, scope_id: str = BIG) -> None:
    store.list_active("user", "nobody")  # creates the table
    conn = sqlite3.connect(store.path, isolation_level=None)
    conn.execute("BEGIN")
    conn.execute(
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < ?) "
        "INSERT INTO learned_memory (fact, fact_key, scope, scope_id, project_id, confidence, "
        "source, created_at, metadata) SELECT 'Fact ' || x || ' about the big user', "
        "'fact ' || x || ' about the big user', 'user', ?, '', 1.0, 'manual', 1e6 + x, '{}' "
        "FROM n",
        (count, scope_id),
    )
    conn.execute("COMMIT")
    conn.close()


def load_postgres(url: str, store: Any, count: int) -> None:
    import psycopg
    from psycopg import sql

    store.list_active("user", "nobody")  # creates the table
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (fact, fact_key, scope, scope_id, project_id, created_at) "
                "SELECT 'Fact ' || x || ' about the big user', "
                "'fact ' || x || ' about the big user', 'user', %s, '', 1e6 + x "
                "FROM generate_series(1, %s) AS x"
            ).format(sql.Identifier(store.table)),
            (BIG, count),
        )
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(store.table)))


def load_redis(store: Any, count: int) -> None:
    client = store.client
    store.list_active("user", "nobody")  # checks the layout first
    first = int(client.incrby(store._k("seq"), count)) - count
    for start in range(1, count + 1, 10_000):
        batch = []
        for n in range(start, min(start + 10_000, count + 1)):
            fact = Fact(text_of(n), scope="user", scope_id=BIG, created_at=1e6 + n)
            batch.append((first + n, fact, normalize_text(fact.fact)))
        pipe = client.pipeline(transaction=False)
        store._queue_create_many(pipe, batch)
        pipe.execute()


# -- the checks every backend runs ------------------------------------------------


def check_one_fact_paths_are_indexed(store: FactStore, count: int) -> None:
    """update(old=text), forget(fact=text) and the default retrieve page never
    read the subject: no list_active over it, and each takes milliseconds."""
    mem = Memory(location=store)
    listed: list[tuple[Any, ...]] = []
    real_list = store.list_active

    def spy(*args: Any, **kwargs: Any) -> list[Fact]:
        listed.append((args, kwargs))
        return real_list(*args, **kwargs)

    store.list_active = spy  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        new_id = mem.update("The big user moved to Lyon", old=text_of(500).upper(), id=BIG)
        update_s = time.perf_counter() - started
        assert listed == []  # found by index, not by listing the user
        assert store.get(new_id).fact == "The big user moved to Lyon"  # type: ignore[union-attr]
        started = time.perf_counter()
        assert mem.forget(tier="user", id=BIG, fact=text_of(501)) == 1
        forget_s = time.perf_counter() - started
        assert store.find_active("user", BIG, "", text_of(501)) is None
        timings = []
        for _ in range(3):
            started = time.perf_counter()
            page = mem.retrieve(tier="user", id=BIG)
            timings.append(time.perf_counter() - started)
        assert len(page) == DEFAULT_LIMIT
        assert page[0].fact == "The big user moved to Lyon"
        nxt = mem.retrieve(tier="user", id=BIG, offset=DEFAULT_LIMIT)
        # page 1: the new fact, then the newest 49 loaded ones; page 2 goes on from there
        assert [f.fact for f in page[1:3]] == [text_of(count), text_of(count - 1)]
        assert [f.fact for f in nxt[:2]] == [text_of(count - 49), text_of(count - 50)]
        assert listed and all(call[0][3] == DEFAULT_LIMIT for call in listed)  # bounded reads
    finally:
        del store.list_active
    # Generous bounds for a shared machine; reading the whole user takes seconds.
    assert update_s < 0.5 and forget_s < 0.5, (update_s, forget_s)
    assert max(timings) < 0.2, timings


def forget_while_probing(store: FactStore, probes: list[Probe], expected: int) -> float:
    """Forget the big user while ``probes`` run; returns the longest probe call in ms."""
    mem = Memory(location=store)
    for probe in probes:
        probe.__enter__()
    try:
        assert mem.forget(tier="user", id=BIG) == expected
    finally:
        for probe in probes:
            probe.__exit__()
    for probe in probes:
        assert not probe.errors, probe.errors
        assert probe.calls > 10
    assert store.list_active("user", BIG) == []
    return max(probe.longest_ms for probe in probes)


def forget_in_one_of_two_tries(
    forget: Callable[[], float], reload: Callable[[], None]
) -> list[float]:
    """Forget the loaded user, and when a probe waited past the bound, reload and try once more.

    A stall of the machine (the disk flooded, both cores taken, the test process
    paused) delays every client, lock holder or not; a delete whose steps hold the
    server or the lock for long fails both tries. Returns each try's longest wait."""
    tries = [forget()]
    if tries[0] >= MAX_PROBE_MS:
        reload()
        tries.append(forget())
    return tries


def kill_midway(
    code: str,
    remaining: Callable[[], int],
    total: int,
    sessions: Callable[[], int] = lambda: 0,
) -> int:
    """Run ``code`` (a delete) in a child process, SIGKILL it once part of the
    subject is gone, and return what is left.

    ``sessions`` counts the server connections the child may hold. A server
    finishes (and may commit) a statement its client sent before it died, so
    the count is read only once the child's connections are gone.
    """
    before = sessions()
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
    )
    try:
        wait_until(
            lambda: remaining() < total or child.poll() is not None,
            "the child deletes its first step",
            timeout=60,
            interval=0.002,
        )
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    wait_until(lambda: sessions() <= before, "the server drops the killed child's connections")
    left = remaining()
    assert 0 < left < total, f"the delete should be killed midway ({left} of {total} left)"
    return left


# -- SQLite ---------------------------------------------------------------------


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SQLiteFactStore]:
    store = SQLiteFactStore(tmp_path / "big.db")
    yield store
    store.close()


def test_sqlite_retrieve_over_a_million_facts_returns_the_default_page_fast(
    sqlite_store: SQLiteFactStore,
) -> None:
    load_sqlite(sqlite_store, 1_000_000)
    check_one_fact_paths_are_indexed(sqlite_store, 1_000_000)


def test_sqlite_forget_of_100k_facts_keeps_the_database_available(
    sqlite_store: SQLiteFactStore,
) -> None:
    neighbour = sqlite_store.add(Fact("neighbour", scope="user", scope_id="other"))
    reader = sqlite3.connect(sqlite_store.path, check_same_thread=False, timeout=30)
    writer = sqlite3.connect(
        sqlite_store.path, check_same_thread=False, timeout=30, isolation_level=None
    )

    def read() -> None:
        assert reader.execute(
            "SELECT fact FROM learned_memory WHERE id = ?", (neighbour,)
        ).fetchone() == ("neighbour",)

    def write() -> None:  # takes the write lock, so it waits for each delete step
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("ROLLBACK")

    # When something else on the machine floods the disk, any commit can stall behind it
    # (a 200-row step was seen taking 220 ms under `dd conv=fsync`), lock holder or not.
    try:
        load_sqlite(sqlite_store, 100_000)
        tries = forget_in_one_of_two_tries(
            lambda: forget_while_probing(sqlite_store, [Probe(read), Probe(write)], 100_000),
            lambda: load_sqlite(sqlite_store, 100_000),
        )
        assert tries[-1] < MAX_PROBE_MS, tries
    finally:
        reader.close()
        writer.close()
    assert [f.fact for f in sqlite_store.list_active("user", "other")] == ["neighbour"]


def test_sqlite_delete_killed_midway_is_finished_by_a_repeat(
    sqlite_store: SQLiteFactStore,
) -> None:
    load_sqlite(sqlite_store, 100_000)
    counter = sqlite3.connect(sqlite_store.path)

    def remaining() -> int:
        return int(
            counter.execute(
                "SELECT COUNT(*) FROM learned_memory WHERE scope = 'user' AND scope_id = ?",
                (BIG,),
            ).fetchone()[0]
        )

    code = (
        "from fastaiagent.facts.sqlite.store import SQLiteFactStore\n"
        f"s = SQLiteFactStore({str(sqlite_store.path)!r})\n"
        "s.delete_batch = 50\n"
        f"s.delete('user', {BIG!r})\n"
    )
    left = kill_midway(code, remaining, 100_000)
    assert counter.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    counter.close()
    assert sqlite_store.delete("user", BIG) == left
    assert sqlite_store.list_active("user", BIG, limit=None) == []
    assert sqlite_store.browse(scope_id=BIG, include_superseded=True) == []


# -- Postgres -------------------------------------------------------------------


@pytest.fixture
def pg_store(postgres_url: str, pg_table: str) -> Iterator[Any]:
    from fastaiagent.facts.postgres.store import PostgresFactStore

    store = PostgresFactStore(postgres_url, table=pg_table)
    yield store
    store.close()


@pytest.mark.postgres
def test_postgres_big_user_one_fact_paths_and_forget_while_select_1_answers(
    postgres_url: str, pg_store: Any
) -> None:
    import psycopg

    load_postgres(postgres_url, pg_store, 100_000)
    check_one_fact_paths_are_indexed(pg_store, 100_000)
    with psycopg.connect(postgres_url, autocommit=True) as other:
        tries = forget_in_one_of_two_tries(
            lambda: forget_while_probing(
                pg_store, [Probe(lambda: other.execute("SELECT 1").fetchone())], 100_000
            ),
            lambda: load_postgres(postgres_url, pg_store, 100_000),
        )
    assert tries[-1] < MAX_PROBE_MS, tries


@pytest.mark.postgres
def test_postgres_delete_killed_midway_is_finished_by_a_repeat(
    postgres_url: str, pg_store: Any
) -> None:
    import psycopg
    from psycopg import sql

    load_postgres(postgres_url, pg_store, 100_000)
    counter = psycopg.connect(postgres_url, autocommit=True)
    query = sql.SQL("SELECT COUNT(*) FROM {} WHERE scope = 'user' AND scope_id = %s").format(
        sql.Identifier(pg_store.table)
    )

    def remaining() -> int:
        return int(counter.execute(query, (BIG,)).fetchone()[0])

    name = "fa-killed-" + pg_store.table

    def sessions() -> int:
        row = counter.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchone()
        return int(row[0])

    child_url = f"{postgres_url}?application_name={name}"  # as the other backend tests name theirs
    code = (
        "from fastaiagent.facts.postgres.store import PostgresFactStore\n"
        f"s = PostgresFactStore({child_url!r}, table={pg_store.table!r})\n"
        "s.delete_batch = 100\n"
        f"s.delete('user', {BIG!r})\n"
    )
    try:
        left = kill_midway(code, remaining, 100_000, sessions)
        assert pg_store.delete("user", BIG) == left
        assert remaining() == 0
    finally:
        counter.close()


# -- Redis ----------------------------------------------------------------------


@pytest.fixture
def redis_store(redis_url: str, redis_prefix: str) -> Iterator[Any]:
    from fastaiagent.facts.redis.store import RedisFactStore

    store = RedisFactStore(redis_url, prefix=redis_prefix)
    yield store
    store.close()


def subject_keys(client: Any, prefix: str) -> list[str]:
    return [k for k in client.scan_iter(match=prefix + ":*", count=5000) if k.endswith(":" + BIG)]


@pytest.mark.redis
def test_redis_big_user_one_fact_paths_and_forget_while_ping_answers(
    own_redis_url: str, redis_prefix: str
) -> None:
    # The slow log and its threshold are the whole server's: a server of the test's own.
    import redis

    from fastaiagent.facts.redis.store import RedisFactStore

    redis_store = RedisFactStore(own_redis_url, prefix=redis_prefix)
    load_redis(redis_store, 100_000)
    check_one_fact_paths_are_indexed(redis_store, 100_000)
    other = redis.Redis.from_url(own_redis_url)

    def forget_timing_steps() -> float:
        # The server's own log times each step too, whatever the machine does to the probe.
        other.slowlog_reset()
        waited = forget_while_probing(redis_store, [Probe(other.ping)], 100_000)
        return max([waited, *(entry["duration"] / 1000 for entry in other.slowlog_get(128))])

    try:
        other.config_set("slowlog-log-slower-than", int(MAX_PROBE_MS * 1000))
        tries = forget_in_one_of_two_tries(
            forget_timing_steps, lambda: load_redis(redis_store, 100_000)
        )
    finally:
        other.close()
    assert tries[-1] < MAX_PROBE_MS, tries
    assert subject_keys(redis_store.client, redis_prefix) == []
    assert redis_store.client.zcard(redis_store._k("all")) == 0
    redis_store.close()


@pytest.mark.redis
def test_redis_delete_killed_midway_is_finished_by_a_repeat(
    redis_url: str, redis_store: Any, redis_prefix: str
) -> None:
    load_redis(redis_store, 100_000)
    hist = redis_store._hist_key("user", BIG, "")
    client = redis_store.client

    def remaining() -> int:
        return int(client.scard(hist))

    def sessions() -> int:
        return sum(c["name"] == redis_store.client_name for c in client.client_list())

    code = (
        "from fastaiagent.facts.redis.store import RedisFactStore\n"
        f"s = RedisFactStore({redis_url!r}, prefix={redis_prefix!r})\n"
        "s.delete_batch = 50\n"
        f"s.delete('user', {BIG!r})\n"
    )
    left = kill_midway(code, remaining, 100_000, sessions)
    assert client.zcard(redis_store._k("all")) == left  # each step is atomic: no half-deleted fact
    assert redis_store.delete("user", BIG) == left
    assert subject_keys(client, redis_prefix) == []
    assert client.zcard(redis_store._k("all")) == 0
