"""Huge users on every backend: forget in bounded steps, one fact by index, bounded reads.

Each backend gets a 100k-fact user, bulk-loaded in the store's own layout (not
through ``add``), and SQLite a 1M-fact one:

- ``forget`` of the whole user goes in many committed steps, and a second
  client gets answers between them (SQLite a write from another connection,
  which needs the lock; Postgres and Redis a count of the user's facts, which
  sees each step's commit): no step holds the server or the database lock for
  the whole delete. How long a step holds them (<= 50 ms) is a figure of
  ``bench/stores.py``, not a bound a test can keep on a loaded machine;
- a process killed (SIGKILL) in the middle of that delete leaves a state that
  a repeat finishes, and the repeat's count is exactly what was left;
- ``update(new, old=<text>)``, ``forget(fact=<text>)`` and the default
  ``retrieve()`` page never read the whole user: they never call
  ``list_active`` over the subject, and the page asks for ``DEFAULT_LIMIT``
  facts (their milliseconds: ``bench/stores.py`` again).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
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
COUNT_BIG = "SELECT count(*) FROM learned_memory WHERE scope = 'user' AND scope_id = ?"
REPO = Path(__file__).resolve().parents[2]


def text_of(n: int) -> str:
    return f"Fact {n} about the big user"


# -- a second client, timed in a thread ------------------------------------------


class Probe:
    """Calls ``call`` in a loop on its own thread (its own connection) and keeps
    what each call returned, so a test can see what a second client saw while
    the first worked."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.call = call
        self.seen: list[Any] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.seen.append(self.call())
            except BaseException as exc:  # reported by the test, never swallowed
                self.errors.append(exc)
                return
            self._stop.wait(0.001)  # pacing, so the probe does not hog a core

    def __enter__(self) -> Probe:
        self._thread.start()
        wait_until(lambda: self.seen or self.errors, "the probe answers once")
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
    read the subject: no list_active over it but the page's own, bounded one."""
    mem = Memory(location=store)
    listed: list[tuple[Any, ...]] = []
    real_list = store.list_active

    def spy(*args: Any, **kwargs: Any) -> list[Fact]:
        listed.append((args, kwargs))
        return real_list(*args, **kwargs)

    store.list_active = spy  # type: ignore[method-assign]
    try:
        new_id = mem.update("The big user moved to Lyon", old=text_of(500).upper(), id=BIG)
        assert listed == []  # found by index, not by listing the user
        assert store.get(new_id).fact == "The big user moved to Lyon"  # type: ignore[union-attr]
        assert mem.forget(tier="user", id=BIG, fact=text_of(501)) == 1
        assert listed == []
        assert store.find_active("user", BIG, "", text_of(501)) is None
        page = mem.retrieve(tier="user", id=BIG)
        assert len(page) == DEFAULT_LIMIT
        assert page[0].fact == "The big user moved to Lyon"
        nxt = mem.retrieve(tier="user", id=BIG, offset=DEFAULT_LIMIT)
        # page 1: the new fact, then the newest 49 loaded ones; page 2 goes on from there
        assert [f.fact for f in page[1:3]] == [text_of(count), text_of(count - 1)]
        assert [f.fact for f in nxt[:2]] == [text_of(count - 49), text_of(count - 50)]
        assert listed and all(call[0][3] == DEFAULT_LIMIT for call in listed)  # bounded reads
    finally:
        del store.list_active


def forget_while_probing(store: FactStore, probe: Probe, expected: int) -> None:
    """Forget the big user while ``probe`` (a count of the user's facts that another
    client can only make between the delete's steps) runs: it must have seen the
    user part-deleted several times, each a step committed with others served
    after it. One delete holding the lock or the server throughout would let it
    see only the whole user, then none."""
    mem = Memory(location=store)
    with probe:
        assert mem.forget(tier="user", id=BIG) == expected
    assert not probe.errors, probe.errors
    midway = {seen for seen in probe.seen if 0 < seen < expected}
    assert len(midway) >= 3, sorted(set(probe.seen))
    assert store.list_active("user", BIG) == []


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

    def write() -> int:  # takes the write lock, so it waits for each delete step
        writer.execute("BEGIN IMMEDIATE")
        try:
            return int(writer.execute(COUNT_BIG, (BIG,)).fetchone()[0])
        finally:
            writer.execute("ROLLBACK")

    try:
        load_sqlite(sqlite_store, 100_000)
        forget_while_probing(sqlite_store, Probe(write), 100_000)
        assert reader.execute(  # another connection's reads went on throughout (WAL)
            "SELECT fact FROM learned_memory WHERE id = ?", (neighbour,)
        ).fetchone() == ("neighbour",)
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
def test_postgres_big_user_one_fact_paths_and_forget_in_steps_others_see(
    postgres_url: str, pg_store: Any
) -> None:
    import psycopg
    from psycopg import sql

    load_postgres(postgres_url, pg_store, 100_000)
    check_one_fact_paths_are_indexed(pg_store, 100_000)
    count = sql.SQL(COUNT_BIG.replace("?", "%s").replace("learned_memory", "{}")).format(
        sql.Identifier(pg_store.table)
    )
    with psycopg.connect(postgres_url, autocommit=True) as other:
        forget_while_probing(pg_store, Probe(lambda: other.execute(count, (BIG,)).fetchone()[0]), 100_000)


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
def test_redis_big_user_one_fact_paths_and_forget_in_steps_others_see(
    own_redis_url: str, redis_prefix: str
) -> None:
    # 100k facts on a server of the test's own: the shared one stays quick to SCAN.
    import redis

    from fastaiagent.facts.redis.store import RedisFactStore

    redis_store = RedisFactStore(own_redis_url, prefix=redis_prefix)
    load_redis(redis_store, 100_000)
    check_one_fact_paths_are_indexed(redis_store, 100_000)
    other = redis.Redis.from_url(own_redis_url)
    hist = redis_store._hist_key("user", BIG, "")
    try:
        forget_while_probing(redis_store, Probe(lambda: int(other.scard(hist))), 100_000)
    finally:
        other.close()
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
