"""Namespaced items in Postgres, on the fact store's per-process connection pool."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from fastaiagent.facts.items import ItemFront, ItemScan, ItemWrite, StoredItem
from fastaiagent.facts.postgres.store import DEFAULT_TABLE as DEFAULT_FACT_TABLE
from fastaiagent.facts.postgres.store import PostgresFactStore, PostgresTable, sql
from fastaiagent.facts.schema import Schema
from fastaiagent.facts.sql_clauses import GuardFailed, ItemSQL, stored_item

DEFAULT_TABLE = "namespaced_items"


def items_table_for(fact_table: str) -> str:
    """The items table that goes with a fact table (a custom fact table gets its own)."""
    return DEFAULT_TABLE if fact_table == DEFAULT_FACT_TABLE else f"{fact_table}_items"


def _schema_queries(table: str) -> dict[str, Any]:
    t, idx = sql.Identifier(table), sql.Identifier(f"idx_{table}_expires")
    return {
        # COLLATE "C": byte order, so a namespace prefix is one index range
        # whatever the database's collation.
        "create": sql.SQL(
            'CREATE TABLE IF NOT EXISTS {} (ns TEXT COLLATE "C" NOT NULL, '
            'key TEXT COLLATE "C" NOT NULL, value TEXT NOT NULL, '
            "created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL, "
            "expires_at DOUBLE PRECISION, ttl_seconds DOUBLE PRECISION, PRIMARY KEY (ns, key))"
        ).format(t),
        "index": sql.SQL(
            "CREATE INDEX IF NOT EXISTS {} ON {} (expires_at) WHERE expires_at IS NOT NULL"
        ).format(idx, t),
    }


class PostgresItemStore(PostgresTable, ItemFront):
    """Items in a Postgres table, sharing a :class:`PostgresFactStore`'s pool (the
    :class:`~fastaiagent.facts.items.ItemStore` contract). A batch of writes is
    one transaction. Expiry uses the clients' clocks."""

    def __init__(self, store: PostgresFactStore, *, table: str | None = None) -> None:
        super().__init__(store, table, items_table_for)
        self._q = _schema_queries(self.table)
        self._schema = Schema(f"items:{self.table}", [self._create_table])
        # Quoted as sql.Identifier would (the name is a checked plain identifier).
        self._sql = ItemSQL(f'"{self.table}"', "%s", no_limit=None)
        self._get = self._sql.select("ns = %s AND key = ANY(%s)")
        self._refresh = (
            f"UPDATE {self._sql.table} SET expires_at = %s + ttl_seconds WHERE ns = %s "
            "AND key = ANY(%s) AND ttl_seconds IS NOT NULL AND expires_at > %s"
        )

    def write_batch(self, batch: list[ItemWrite], now: float) -> list[bool]:
        """Apply a checked batch in one transaction."""

        def apply(conn: Any) -> list[bool]:
            with conn.transaction():
                return self._sql.write(conn, batch, now)

        return self._run(apply)

    def write_guarded(self, batch: list[ItemWrite], now: float) -> bool:
        """Apply a checked batch in one transaction when each conditional write applies."""

        def apply(conn: Any) -> bool:
            try:
                with conn.transaction():
                    self._sql.write_guarded(conn, batch, now)
            except GuardFailed:
                return False  # rolled back
            return True

        return bool(self._run(apply))

    def read_items(self, ns: str, keys: list[str], refresh_ttl: bool) -> Iterable[StoredItem]:
        """The live items of ``keys``, their expiry restarted first when asked."""
        now = time.time()

        def read(conn: Any) -> list[Any]:
            if refresh_ttl:
                conn.execute(self._refresh, (now, ns, keys, now))
            return conn.execute(self._get, (ns, keys, now)).fetchall()

        return [stored_item(row) for row in self._run(read)]

    def scan_items(self, scan: ItemScan) -> list[StoredItem]:
        """Live items of a checked scan, in (namespace, key) order."""
        query, params = self._sql.scan(scan)
        return [stored_item(row) for row in self._run(lambda conn: conn.execute(query, params).fetchall())]

    def read_namespaces(self, low: str, high: str) -> list[str]:
        """Encoded namespaces in ``[low, high)`` with a live item."""
        params = (low, high, time.time())
        return [row[0] for row in self._run(lambda conn: conn.execute(self._sql.namespaces, params).fetchall())]

    def delete_range(self, low: str, high: str) -> int:
        """Delete every item of the namespaces in ``[low, high)``."""
        return int(self._run(lambda conn: conn.execute(self._sql.delete_prefix, (low, high)).rowcount))

    def purge_expired(self) -> int:
        """Delete expired rows now; returns the count."""
        now = time.time()
        return int(self._run(lambda conn: conn.execute(self._sql.purge, (now,)).rowcount))
