"""Schema versions in Postgres: the ``fastaiagent_schema`` table and its migration runner.

The same model as the SQLite files (:mod:`fastaiagent._schema`): one row per
component (``facts:<table>``, ``windows:<table>``) holding its version. An open
that finds the current version runs no DDL and takes no lock. Otherwise the
missing steps run under a session advisory lock on the component's table, so
concurrent workers wait for the first and then find the work done. Postgres
steps may build indexes ``CONCURRENTLY``, which cannot run in a transaction, so
each step is idempotent and the version is written after the last one: an
interrupted migration simply runs again.

This module needs no driver import: it runs on a psycopg connection it is given
(in autocommit mode, as the stores' pools open them).

Behind a transaction-mode pooler (PgBouncer ``pool_mode = transaction``) a
session lives only as long as a transaction: a session advisory lock taken by
one statement may be released by the next on another server connection, and
``CONCURRENTLY`` cannot run inside a transaction. So a store opened with
``pooler="transaction"`` runs its schema work inside one transaction, and the
helpers here see that (:func:`in_transaction`): the lock becomes a transaction
lock and index builds are plain ``CREATE INDEX`` (they block writers to that
table while they build: run an upgrade of a large table once over a direct
connection to build concurrently).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastaiagent._schema import VERSION_TABLE, Schema, check_not_newer, sql_statements

__all__ = [
    "VERSION_TABLE",
    "Schema",
    "advisory_lock",
    "in_transaction",
    "migrate_postgres",
    "recorded_version",
    "run_ddl",
]

_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE: no transaction open on the connection

_CREATE_VERSION_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} "
    "(component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
)


def _regclass(table: str) -> str:
    """``table`` as to_regclass reads it: quoted, so its case is kept."""
    return '"' + table.replace('"', '""') + '"'


def recorded_version(conn: Any, component: str, table: str) -> int:
    """The version recorded for ``component``, or 0: nothing recorded (a table
    written before versions existed) or ``table`` missing (new, or dropped)."""
    has_table, has_versions = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL",
        (_regclass(table), VERSION_TABLE),
    ).fetchone()
    if not (has_table and has_versions):
        return 0
    row = conn.execute(
        f"SELECT version FROM {VERSION_TABLE} WHERE component = %s", (component,)
    ).fetchone()
    return int(row[0]) if row else 0


def _create_version_table(conn: Any) -> None:
    """Concurrent CREATE TABLE IF NOT EXISTS can still collide in Postgres: serialise it."""
    if conn.execute("SELECT to_regclass(%s)", (VERSION_TABLE,)).fetchone()[0] is not None:
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"fastaiagent:{VERSION_TABLE}",))
        conn.execute(_CREATE_VERSION_TABLE)


@contextmanager
def advisory_lock(conn: Any, table: str) -> Iterator[None]:
    """The session advisory lock that serialises schema work on ``table`` across workers.

    Waiters poll with ``pg_try_advisory_lock`` instead of blocking in
    ``pg_advisory_lock``: a blocked statement is an open transaction, and the
    holder's ``CREATE INDEX CONCURRENTLY`` waits for every open transaction to
    end, which would deadlock the two.
    """
    key = f"fastaiagent:{table}"
    if in_transaction(conn):  # behind a transaction pooler: the lock ends with the transaction
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (key,))
        yield
        return
    delay = 0.005
    while not conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone()[0]:
        time.sleep(delay)  # another worker is migrating; it usually takes milliseconds
        delay = min(delay * 2, 0.25)
    try:
        yield
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))


def in_transaction(conn: Any) -> bool:
    """Whether ``conn`` has a transaction open (schema work behind a transaction pooler)."""
    return bool(conn.info.transaction_status != _IDLE)


def run_ddl(conn: Any, statement: Any) -> None:
    """Run ``statement``; inside a transaction without ``CONCURRENTLY``, which cannot
    run in one (see the module doc)."""
    if in_transaction(conn):
        text = statement if isinstance(statement, str) else statement.as_string(conn)
        statement = text.replace(" CONCURRENTLY", "")
    conn.execute(statement)


def migrate_postgres(conn: Any, schema: Schema, table: str, where: str) -> bool:
    """Bring ``schema.component`` (stored in ``table``) to ``schema.version``.

    Returns True when steps ran. Raises
    :class:`~fastaiagent.errors.SchemaVersionError` for a newer version.
    """
    found = recorded_version(conn, schema.component, table)
    check_not_newer(schema, found, where)
    if found == schema.version:
        return False
    with advisory_lock(conn, table):
        _create_version_table(conn)
        found = recorded_version(conn, schema.component, table)  # another worker may have run
        check_not_newer(schema, found, where)
        if found == schema.version:
            return False
        for step in schema.steps[found:]:
            if isinstance(step, str):
                with conn.transaction():
                    for statement in sql_statements(step):
                        conn.execute(statement)
            else:
                step(conn)
        conn.execute(
            f"INSERT INTO {VERSION_TABLE} (component, version) VALUES (%s, %s) "
            "ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version",
            (schema.component, schema.version),
        )
        return True
