"""The WindowStore contract on the real SQLite file, Postgres and Redis.

Every store is built the way ``Memory(window_store="shared")`` builds it: on the
fact store's own connections. Names are unique per run (tables, key prefixes).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from _wait import wait_until
from fastaiagent.agent.windows import WindowKey, WindowStore, window_store_for
from fastaiagent.facts.sqlite.store import MemoryStore
from fastaiagent.facts.windows import check_ttl

ALICE = WindowKey("agent", "proj", "alice")


@pytest.fixture(params=["sqlite", "postgres", "pgbouncer", "redis"])
def windows(request, tmp_path) -> Iterator[WindowStore]:
    """A fresh WindowStore on each backend (unique table / key prefix), cleaned up after;
    ``pgbouncer``: Postgres through a transaction-mode PgBouncer."""
    if request.param == "sqlite":
        yield window_store_for(MemoryStore(tmp_path / "w.db"))
    elif request.param in ("postgres", "pgbouncer"):
        from fastaiagent.facts.postgres.store import PostgresFactStore

        url, table = request.getfixturevalue("postgres_url"), request.getfixturevalue("pg_table")
        pooled = request.param == "pgbouncer"
        reach = request.getfixturevalue("pgbouncer_url") if pooled else url
        facts = PostgresFactStore(reach, table=table, max_pool_size=4, pooler="transaction" if pooled else None)
        yield window_store_for(facts)
        facts.close()  # pg_table destroys its store
    else:
        from fastaiagent.facts.redis.store import RedisFactStore

        url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
        facts = RedisFactStore(url, prefix=prefix)
        yield window_store_for(facts)  # its keys live under the prefix the fixture drops
        facts.close()


def test_missing_window_loads_as_none(windows: WindowStore) -> None:
    assert windows.load(ALICE) is None
    assert windows.load(ALICE, "deadbeef") is None
    assert windows.delete(ALICE) is False


def test_create_then_compare_and_set(windows: WindowStore) -> None:
    v1 = windows.save(ALICE, '{"n": 1}', None, None)
    assert v1
    assert windows.save(ALICE, '{"n": 2}', None, None) is None  # exists: create conflicts
    assert windows.load(ALICE) == (v1, '{"n": 1}')
    v2 = windows.save(ALICE, '{"n": 2}', v1, None)
    assert v2 and v2 != v1
    assert windows.save(ALICE, '{"n": 3}', v1, None) is None  # stale version loses
    assert windows.load(ALICE) == (v2, '{"n": 2}')


def test_known_version_skips_the_state(windows: WindowStore) -> None:
    version = windows.save(ALICE, "x" * 5000, None, None)
    assert windows.load(ALICE, version) == (version, None)
    assert windows.load(ALICE, "other") == (version, "x" * 5000)


def test_unicode_and_large_states_round_trip(windows: WindowStore) -> None:
    state = '{"text": "héllo ✓ 日本 \\u0000"}' + " " * 200_000
    version = windows.save(ALICE, state, None, None)
    assert windows.load(ALICE) == (version, state)


def test_keys_are_scoped(windows: WindowStore) -> None:
    others = [
        WindowKey("agent", "proj", "bob"),
        WindowKey("other-agent", "proj", "alice"),
        WindowKey("agent", "other-proj", "alice"),
        WindowKey("", "", "alice"),
        WindowKey("agent:proj", "", "alice"),  # a ':' never makes two keys collide
        WindowKey("agent", "proj:alice", ""),
    ]
    for i, key in enumerate(others):
        windows.save(key, f"other {i}", None, None)
    windows.save(ALICE, "alice", None, None)
    assert windows.delete(ALICE) is True
    assert windows.load(ALICE) is None
    for i, key in enumerate(others):
        loaded = windows.load(key)
        assert loaded is not None and loaded.state == f"other {i}"


def test_delete_all_clears_one_agent_and_project(windows: WindowStore) -> None:
    for user in ("alice", "bob", "c:d", "e%f"):
        windows.save(WindowKey("agent", "proj", user), user, None, None)
    keep = [
        WindowKey("agent", "proj2", "alice"),
        WindowKey("agent2", "proj", "alice"),
        WindowKey("agent", "proj:x", "alice"),
    ]
    for key in keep:
        windows.save(key, "keep", None, None)
    assert windows.delete_all("agent", "proj") == 4
    assert windows.load(WindowKey("agent", "proj", "bob")) is None
    assert all(windows.load(key) is not None for key in keep)


def test_delete_user_clears_that_user_for_every_agent_of_the_project(windows: WindowStore) -> None:
    mine = [WindowKey(agent, "proj", "alice") for agent in ("agent", "agent2", "", "a:b", "a*b")]
    for key in mine:
        windows.save(key, "alice", None, None)
    keep = [
        WindowKey("agent", "proj", "bob"),
        WindowKey("agent", "proj2", "alice"),  # another project
        WindowKey("agent", "proj", "alice2"),
        WindowKey("agent", "proj", "xalice"),
        WindowKey("agent", "proj:alice", ""),  # a ':' never makes two keys collide
        WindowKey("agent", "", "proj:alice"),
        WindowKey("agent:proj", "alice", "x"),
    ]
    for key in keep:
        windows.save(key, "keep", None, None)
    assert windows.delete_user("proj", "alice") == len(mine)
    assert all(windows.load(key) is None for key in mine)
    assert all(windows.load(key) is not None for key in keep)
    assert windows.delete_user("proj", "alice") == 0


@pytest.mark.parametrize(("project", "user"), [("proj", "*"), ("*", "alice"), ("proj", "")])
def test_delete_user_refuses_wildcards_and_empty_users(windows: WindowStore, project, user) -> None:
    windows.save(ALICE, "alice", None, None)
    with pytest.raises(ValueError, match=r'cannot be "\*"|needs a user id'):
        windows.delete_user(project, user)
    assert windows.load(ALICE) is not None


def test_a_version_1_sqlite_windows_table_gets_the_user_index(tmp_path) -> None:
    import sqlite3

    from fastaiagent._schema import VERSION_TABLE
    from fastaiagent.facts.sqlite.windows import _V1

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # a file written by the version-1 code
        conn.executescript(_V1.format(t="conversation_windows"))
        conn.execute(
            "INSERT INTO conversation_windows VALUES ('a', 'p', 'alice', 'v1', 'old', 0, NULL)"
        )
    windows = window_store_for(MemoryStore(path))
    assert windows.delete_user("p", "alice") == 1
    with sqlite3.connect(path) as conn:
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(conversation_windows)")}
        version = conn.execute(
            f"SELECT version FROM {VERSION_TABLE} WHERE component = 'windows:conversation_windows'"
        ).fetchone()
    assert "idx_conversation_windows_user" in indexes
    assert version == (2,)


def test_idle_windows_expire_and_can_start_again(windows: WindowStore) -> None:
    old = windows.save(ALICE, "old", None, 0.3)
    windows.save(WindowKey("agent", "proj", "forever"), "kept", None, None)
    assert windows.load(ALICE) == (old, "old")
    wait_until(lambda: windows.load(ALICE) is None, "the idle window expires", timeout=10)
    assert windows.load(ALICE, old) is None
    new = windows.save(ALICE, "new", None, 0.3)  # takes the place of the expired one
    assert new and new != old
    assert windows.load(ALICE) == (new, "new")
    assert windows.load(WindowKey("agent", "proj", "forever")) is not None


def test_each_write_extends_the_ttl(windows: WindowStore) -> None:
    # Alice's window and a control saved after it, both for 1.5 s; alice's is saved
    # again and again until the control expires. Without the extension alice's would
    # have expired first; with it, it lives on: the two clocks are the store's own,
    # and no sleep has to fit in the TTL (only a load between two of alice's saves).
    control = WindowKey("agent", "proj", "control")
    version = windows.save(ALICE, "a", None, 1.5)
    assert windows.save(control, "c", None, 1.5)

    def control_expired() -> bool:
        nonlocal version
        version = windows.save(ALICE, "a", version, 1.5)
        assert version
        return windows.load(control) is None

    wait_until(control_expired, "the control window expires", timeout=30, interval=0.05)
    assert windows.load(ALICE) is not None


def test_concurrent_writers_never_lose_an_update(windows: WindowStore) -> None:
    """8 threads each add 25 items with load / compare-and-set / retry."""
    key = WindowKey("agent", "proj", "counter")

    def worker(name: str) -> None:
        for i in range(25):
            while True:
                current = windows.load(key)
                items = current.state.split(",") if current and current.state else []
                expected = current.version if current else None
                if windows.save(key, ",".join([*items, f"{name}{i}"]), expected, None):
                    break

    threads = [threading.Thread(target=worker, args=(f"t{n}-",)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    final = windows.load(key)
    assert final is not None and final.state is not None
    items = final.state.split(",")
    assert sorted(items) == sorted(f"t{n}-{i}" for n in range(8) for i in range(25))
    for n in range(8):  # each writer's items stay in its own order
        mine = [item for item in items if item.startswith(f"t{n}-")]
        assert mine == [f"t{n}-{i}" for i in range(25)]


def test_bad_keys_and_ttls_are_refused(windows: WindowStore) -> None:
    with pytest.raises(ValueError, match=r"\*"):
        windows.load(WindowKey("agent", "proj", "*"))
    with pytest.raises(TypeError, match="expected a WindowKey, got tuple"):
        windows.save(("agent", "proj", "alice"), "x", None, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"WindowKey\.user_id must be a str, got int"):
        windows.delete(WindowKey("agent", "proj", 7))  # type: ignore[arg-type]
    for bad in (0, -1):
        with pytest.raises(ValueError, match="window_ttl_seconds must be > 0"):
            check_ttl(bad)
    for wrong_type in (True, "10"):
        with pytest.raises(TypeError, match="window_ttl_seconds must be a number"):
            check_ttl(wrong_type)  # type: ignore[arg-type]
    assert check_ttl(None) is None and check_ttl(30) == 30.0


def test_a_repeated_write_that_already_landed_succeeds_again(windows, monkeypatch) -> None:
    """What a retry after a dropped connection sees: its own write is already there."""
    from fastaiagent.facts import windows as module  # WindowStore.save makes the versions

    monkeypatch.setattr(module, "new_version", lambda: "fixed-1")
    assert windows.save(ALICE, "first", None, None) == "fixed-1"
    assert windows.save(ALICE, "first", None, None) == "fixed-1"  # the create, repeated
    monkeypatch.setattr(module, "new_version", lambda: "fixed-2")
    assert windows.save(ALICE, "second", "fixed-1", None) == "fixed-2"
    assert windows.save(ALICE, "second", "fixed-1", None) == "fixed-2"  # the update, repeated
    assert windows.load(ALICE) == ("fixed-2", "second")
    monkeypatch.setattr(module, "new_version", lambda: "fixed-3")
    assert windows.save(ALICE, "stale", "fixed-1", None) is None  # a real conflict still loses


@pytest.mark.postgres
def test_postgres_windows_survive_dropped_connections(postgres_url, pg_table) -> None:
    import psycopg

    from fastaiagent.facts.postgres.store import PostgresFactStore

    facts = PostgresFactStore(f"{postgres_url}?application_name={pg_table}", table=pg_table, max_pool_size=2)
    windows = window_store_for(facts)
    try:
        version = windows.save(ALICE, "before", None, None)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                (pg_table,),
            )
        assert windows.load(ALICE) == (version, "before")  # reconnects and retries once
        assert windows.save(ALICE, "after", version, None)
    finally:
        facts.close()


def test_a_version_1_postgres_windows_table_gets_the_user_index(postgres_url, pg_table) -> None:
    import psycopg

    from fastaiagent._schema import VERSION_TABLE
    from fastaiagent.facts.postgres.store import PostgresFactStore

    table = f"{pg_table}_windows"
    component = f"windows:{table}"
    facts = PostgresFactStore(postgres_url, table=pg_table, max_pool_size=2)
    try:
        window_store_for(facts).save(ALICE, "alice", None, None)
        with psycopg.connect(postgres_url, autocommit=True) as conn:  # back to version 1
            conn.execute(f'DROP INDEX "idx_{table}_user"')
            conn.execute(f"UPDATE {VERSION_TABLE} SET version = 1 WHERE component = %s", (component,))
        reopened = PostgresFactStore(postgres_url, table=pg_table, max_pool_size=2)
        try:
            assert window_store_for(reopened).delete_user("proj", "alice") == 1
        finally:
            reopened.close()
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            index = conn.execute("SELECT to_regclass(%s)", (f"idx_{table}_user",)).fetchone()
            version = conn.execute(
                f"SELECT version FROM {VERSION_TABLE} WHERE component = %s", (component,)
            ).fetchone()
        assert index[0] is not None
        assert version == (2,)
    finally:
        facts.close()
