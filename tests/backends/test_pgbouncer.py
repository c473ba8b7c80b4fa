"""Postgres behind PgBouncer in transaction pooling mode: what the conformance suites
do not show (they run there too: test_conformance, test_vector_conformance,
test_window_store): concurrent workers, first opens racing, the location URL."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from fastaiagent import Memory
from fastaiagent.errors import InvalidValueError
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.postgres.store import PostgresFactStore

pytestmark = pytest.mark.postgres


def _in_threads(count: int, work: Any) -> list[BaseException]:
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            work(n)
        except BaseException as exc:  # collected: the test asserts there are none
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_first_opens_racing_through_the_pooler_leave_no_lock_held(pgbouncer_url: str, postgres_url: str, pg_table: str) -> None:
    stores = [PostgresFactStore(pgbouncer_url, table=pg_table, pooler="transaction") for _ in range(4)]
    errors = _in_threads(4, lambda n: stores[n].vector_store().count(None))  # facts, then vectors
    assert errors == []
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as admin:  # straight to the server
        held = admin.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid::int IN "
            "(hashtext(%s), hashtext(%s))",
            (f"fastaiagent:{pg_table}", f"fastaiagent:{pg_table}_vectors"),
        ).fetchone()[0]
        versions = dict(admin.execute(
            "SELECT component, version FROM fastaiagent_schema WHERE component LIKE %s", (f"%:{pg_table}%",)
        ).fetchall())  # fmt: skip
    assert held == 0  # a session lock taken through a pooler would stay on some server connection
    assert set(versions) == {f"facts:{pg_table}", f"vectors:{pg_table}_vectors"}
    for store in stores:
        store.close()


def test_workers_through_the_pooler_lose_no_acknowledged_write(pgbouncer_url: str, pg_table: str) -> None:
    store = PostgresFactStore(pgbouncer_url, table=pg_table, pooler="transaction", max_pool_size=4)

    def work(n: int) -> None:
        for i in range(25):  # past psycopg's prepare threshold (5) on every connection
            store.add(Fact(f"worker {n} fact {i}", scope="user", scope_id=f"u{n}"))
            assert len(store.list_active("user", f"u{n}", limit=None)) == i + 1

    assert _in_threads(6, work) == []
    assert sorted(len(store.list_active("user", f"u{n}", limit=None)) for n in range(6)) == [25] * 6
    store.close()


def test_a_location_url_names_the_pooler(pgbouncer_url: str, pg_table: str) -> None:
    location = f"{pgbouncer_url}?table={pg_table}&pooler=transaction"
    memory = Memory(location, agent_id="support")
    assert memory.location.pooler == "transaction"  # type: ignore[attr-defined]
    memory.persist("prefers tea", tier="user", id="ann")
    assert [f.fact for f in Memory(location).retrieve(tier="user", id="ann")] == ["prefers tea"]
    assert Memory(location).retrieve(tier="user", id="bob") == []  # another user: nothing
    memory.location.close()
    with pytest.raises(InvalidValueError, match="pooler must be one of 'transaction', 'session', got 'statement'"):
        Memory(f"{pgbouncer_url}?table={pg_table}&pooler=statement")


def test_a_pooler_that_drops_sessions_is_named_in_the_error() -> None:
    import psycopg

    from fastaiagent.errors import StoreConfigError
    from fastaiagent.facts.postgres.store import statement_failure

    for error in (psycopg.errors.DuplicatePreparedStatement, psycopg.errors.InvalidSqlStatementName):
        mapped = statement_failure(error('prepared statement "_pg3_0" already exists'), "(postgresql://h/db)")
        assert isinstance(mapped, StoreConfigError)
        assert "pass pooler='transaction'" in str(mapped)


def test_a_pooler_the_url_does_not_name_is_noticed_and_no_write_is_lost(
    pgbouncer_url: str, postgres_url: str, pg_table: str
) -> None:
    store = PostgresFactStore(pgbouncer_url, table=pg_table, max_pool_size=4)  # no pooler=

    def work(n: int) -> None:
        for i in range(40):  # past psycopg's prepare threshold (5) on every connection
            store.add(Fact(f"worker {n} fact {i}", scope="user", scope_id=f"u{n}"))
            store.list_active("user", f"u{n}", limit=3)

    assert _in_threads(8, work) == []  # every write acknowledged, none refused
    assert store.pooler == "transaction"
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as admin:  # straight to the server
        stored = admin.execute(f'SELECT count(*) FROM "{pg_table}"').fetchone()[0]
    assert stored == 8 * 40
    store.close()


def test_a_direct_connection_is_not_taken_for_a_pooler(postgres_url: str, pg_table: str) -> None:
    store = PostgresFactStore(postgres_url, table=pg_table)
    store.add(Fact("prefers tea", scope="user", scope_id="ann"))
    assert store.pooler is None  # prepared statements stay on: the server is reached directly
    store.close()
