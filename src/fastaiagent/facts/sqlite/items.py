"""Namespaced items in the fact store's SQLite file (same connections, own table)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from fastaiagent._schema import Schema
from fastaiagent._sqlite import migrate
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.items import (
    ItemWrite,
    Namespace,
    StoredItem,
    check_key,
    check_page,
    check_write,
    decode_namespace,
    encode_namespace,
    expiry,
    prefix_range,
    scan_filter,
)
from fastaiagent.facts.sqlite.store import SQLiteFactStore

DEFAULT_TABLE = "namespaced_items"
PURGE_EVERY = 1000  # writes between sweeps of expired rows (reads ignore them anyway)

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

_LIVE = "(expires_at IS NULL OR expires_at > ?)"
_COLUMNS = "ns, key, value, created_at, updated_at, expires_at, ttl_seconds"


def items_schema(table: str) -> Schema:
    """The migrations of an items table (component ``items:<table>``)."""
    return Schema(f"items:{table}", [_V1.format(t=table)])


def _item(row: Sequence[Any]) -> StoredItem:
    return StoredItem(decode_namespace(row[0]), *row[1:])


class SQLiteItemStore:
    """Items in a table of a :class:`~fastaiagent.facts.sqlite.store.SQLiteFactStore` file
    (the :class:`~fastaiagent.facts.items.ItemStore` contract). A batch of writes
    is one ``BEGIN IMMEDIATE`` transaction."""

    def __init__(self, store: SQLiteFactStore, *, table: str = DEFAULT_TABLE) -> None:
        if not isinstance(store, SQLiteFactStore):
            raise InvalidTypeError(f"SQLiteItemStore needs a SQLiteFactStore, got {type(store).__name__}")
        if not table.replace("_", "").isalnum() or not table[0].isalpha():
            raise InvalidValueError(f"table {table!r} must be a plain identifier")
        self.store = store
        self.table = table
        self._ready = False
        self._lock = threading.Lock()
        self._writes = 0
        t = table
        self._q = {
            "delete": f"DELETE FROM {t} WHERE ns = ? AND key = ? RETURNING expires_at",
            "put": (
                f"INSERT INTO {t} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value, "
                "updated_at = excluded.updated_at, expires_at = excluded.expires_at, "
                "ttl_seconds = excluded.ttl_seconds, created_at = CASE WHEN "
                f"{t}.expires_at IS NOT NULL AND {t}.expires_at <= excluded.updated_at "
                f"THEN excluded.created_at ELSE {t}.created_at END"
            ),
            # Insert, or take over a row that has expired (it is gone for readers).
            "add": (
                f"INSERT INTO {t} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value, "
                "created_at = excluded.created_at, updated_at = excluded.updated_at, "
                "expires_at = excluded.expires_at, ttl_seconds = excluded.ttl_seconds "
                f"WHERE {t}.expires_at IS NOT NULL AND {t}.expires_at <= excluded.updated_at"
            ),
        }

    def __repr__(self) -> str:
        return f"SQLiteItemStore(path={str(self.store.path)!r}, table={self.table!r})"

    def _conn(self) -> Any:
        conn = self.store._connection()
        if not self._ready:
            with self._lock:
                if not self._ready:
                    migrate(conn, items_schema(self.table), str(self.store.path))
                    self._ready = True
        return conn

    def write(self, writes: Sequence[ItemWrite]) -> list[bool]:
        """Apply a batch in one transaction (see :class:`ItemStore`)."""
        batch = [check_write(w) for w in writes]
        if not batch:
            return []
        self._conn()
        now = time.time()
        changed: list[bool] = []
        with self.store._write() as conn:
            for w in batch:
                ns = encode_namespace(w.namespace)
                if w.value is None:
                    rows = conn.execute(self._q["delete"], (ns, w.key)).fetchall()
                    changed.append(any(r[0] is None or r[0] > now for r in rows))
                    continue
                params = (ns, w.key, w.value, now, now, expiry(now, w.ttl_seconds), w.ttl_seconds)
                cursor = conn.execute(self._q["add" if w.if_absent else "put"], params)
                changed.append(cursor.rowcount == 1)
        self._writes += len(batch)
        if self._writes >= PURGE_EVERY:
            self._writes = 0
            self.purge_expired()
        return changed

    def get(
        self, namespace: Namespace, keys: Sequence[str], *, refresh_ttl: bool = False
    ) -> list[StoredItem | None]:
        """The live items of ``keys`` (see :class:`ItemStore`)."""
        ns = encode_namespace(namespace)
        wanted = [check_key(k) for k in keys]
        if not wanted:
            return []
        marks = ", ".join("?" * len(wanted))
        self._conn()
        now = time.time()
        if refresh_ttl:
            with self.store._write() as conn:
                conn.execute(
                    f"UPDATE {self.table} SET expires_at = ? + ttl_seconds WHERE ns = ? "
                    f"AND key IN ({marks}) AND ttl_seconds IS NOT NULL AND expires_at > ?",
                    (now, ns, *wanted, now),
                )
        rows = self._conn().execute(
            f"SELECT {_COLUMNS} FROM {self.table} WHERE ns = ? AND key IN ({marks}) AND {_LIVE}",
            (ns, *wanted, now),
        ).fetchall()
        found = {row[1]: _item(row) for row in rows}
        return [found.get(k) for k in wanted]

    def scan(
        self,
        prefix: Namespace,
        *,
        exact: bool = False,
        before: str | None = None,
        descending: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[StoredItem]:
        """Live items under ``prefix`` in (namespace, key) order (see :class:`ItemStore`)."""
        limit, offset = check_page(limit, offset)
        where, strings = scan_filter(prefix, exact=exact, before=before, mark="?")
        params: list[Any] = list(strings)
        order = "DESC" if descending else "ASC"
        params += [time.time(), -1 if limit is None else limit, offset]
        rows = self._conn().execute(
            f"SELECT {_COLUMNS} FROM {self.table} WHERE {where} AND {_LIVE} "
            f"ORDER BY ns {order}, key {order} LIMIT ? OFFSET ?",
            params,
        ).fetchall()
        return [_item(row) for row in rows]

    def namespaces(self, prefix: Namespace = ()) -> list[Namespace]:
        """Namespaces with live items under ``prefix`` (see :class:`ItemStore`)."""
        rows = self._conn().execute(
            f"SELECT DISTINCT ns FROM {self.table} WHERE ns >= ? AND ns < ? AND {_LIVE} ORDER BY ns",
            (*prefix_range(prefix), time.time()),
        ).fetchall()
        return [decode_namespace(row[0]) for row in rows]

    def delete_prefix(self, prefix: Namespace) -> int:
        """Delete everything under ``prefix`` (see :class:`ItemStore`)."""
        self._conn()
        with self.store._write() as conn:
            return int(
                conn.execute(
                    f"DELETE FROM {self.table} WHERE ns >= ? AND ns < ?", prefix_range(prefix)
                ).rowcount
            )

    def purge_expired(self) -> int:
        """Delete expired rows now; returns the count."""
        self._conn()
        with self.store._write() as conn:
            return int(
                conn.execute(
                    f"DELETE FROM {self.table} WHERE expires_at IS NOT NULL AND expires_at <= ?",
                    (time.time(),),
                ).rowcount
            )

    def close(self) -> None:
        """Nothing to release: the connections belong to the fact store."""
