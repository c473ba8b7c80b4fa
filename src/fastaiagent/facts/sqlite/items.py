"""Namespaced items in the fact store's SQLite file (same connections, own table)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from fastaiagent._schema import Schema
from fastaiagent.facts.items import ItemFront, ItemScan, ItemWrite, StoredItem
from fastaiagent.facts.sql_clauses import GuardFailed, ItemSQL, stored_item
from fastaiagent.facts.sqlite.store import SQLiteFactStore, SQLiteTable

DEFAULT_TABLE = "namespaced_items"

# WITHOUT ROWID: the primary key is the table, so a namespace's items are
# stored together in key order and a prefix scan reads one contiguous range.
_V1 = """
CREATE TABLE IF NOT EXISTS {t} (
    ns TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL,
    ttl_seconds REAL,
    PRIMARY KEY (ns, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idx_{t}_expires ON {t} (expires_at) WHERE expires_at IS NOT NULL;
"""


def items_schema(table: str) -> Schema:
    """The migrations of an items table (component ``items:<table>``)."""
    return Schema(f"items:{table}", [_V1.format(t=table)])


class SQLiteItemStore(SQLiteTable, ItemFront):
    """Items in a table of a :class:`~fastaiagent.facts.sqlite.store.SQLiteFactStore` file
    (the :class:`~fastaiagent.facts.items.ItemStore` contract). A batch of writes
    is one ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, store: SQLiteFactStore, *, table: str = DEFAULT_TABLE) -> None:
        super().__init__(store, table, items_schema(table))
        self._sql = ItemSQL(table, "?", no_limit=-1)

    def write_batch(self, batch: list[ItemWrite], now: float) -> list[bool]:
        """Apply a checked batch in one transaction."""
        self._conn()
        with self.store._table_write() as conn:
            return self._sql.write(conn, batch, now)

    def write_guarded(self, batch: list[ItemWrite], now: float) -> bool:
        """Apply a checked batch in one transaction when each conditional write applies."""
        self._conn()
        try:
            with self.store._table_write() as conn:
                self._sql.write_guarded(conn, batch, now)
        except GuardFailed:
            return False  # rolled back
        return True

    def read_items(self, ns: str, keys: list[str], refresh_ttl: bool) -> Iterable[StoredItem]:
        """The live items of ``keys``, their expiry restarted first when asked."""
        marks = ", ".join("?" * len(keys))
        now = time.time()
        if refresh_ttl:
            self._execute_write(
                f"UPDATE {self.table} SET expires_at = ? + ttl_seconds WHERE ns = ? "
                f"AND key IN ({marks}) AND ttl_seconds IS NOT NULL AND expires_at > ?",
                (now, ns, *keys, now),
            )
        query = self._sql.select(f"ns = ? AND key IN ({marks})")
        return [stored_item(row) for row in self._conn().execute(query, (ns, *keys, now))]

    def scan_items(self, scan: ItemScan) -> list[StoredItem]:
        """Live items of a checked scan, in (namespace, key) order."""
        query, params = self._sql.scan(scan)
        return [stored_item(row) for row in self._conn().execute(query, params)]

    def read_namespaces(self, low: str, high: str) -> list[str]:
        """Encoded namespaces in ``[low, high)`` with a live item."""
        rows = self._conn().execute(self._sql.namespaces, (low, high, time.time()))
        return [row[0] for row in rows]

    def delete_range(self, low: str, high: str) -> int:
        """Delete every item of the namespaces in ``[low, high)``."""
        return self._execute_write(self._sql.delete_prefix, (low, high))

    def purge_expired(self) -> int:
        """Delete expired rows now; returns the count."""
        return self._execute_write(self._sql.purge, (time.time(),))
