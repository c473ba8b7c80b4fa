"""Namespaced items in Postgres, on the fact store's per-process connection pool."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

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
from fastaiagent.facts.postgres.store import DEFAULT_TABLE as DEFAULT_FACT_TABLE
from fastaiagent.facts.postgres.store import PostgresFactStore, redacted_url, sql
from fastaiagent.facts.schema import Schema, migrate_postgres

DEFAULT_TABLE = "namespaced_items"
PURGE_EVERY = 1000  # writes per process between sweeps of expired rows (reads ignore them)
_COLUMNS = "ns, key, value, created_at, updated_at, expires_at, ttl_seconds"
_LIVE = "(expires_at IS NULL OR expires_at > %s)"


def items_table_for(fact_table: str) -> str:
    """The items table that goes with a fact table (a custom fact table gets its own)."""
    return DEFAULT_TABLE if fact_table == DEFAULT_FACT_TABLE else f"{fact_table}_items"


def _item(row: Sequence[Any]) -> StoredItem:
    return StoredItem(decode_namespace(row[0]), *row[1:])


def _queries(table: str) -> dict[str, Any]:
    t = sql.Identifier(table)
    q = {
        # COLLATE "C": byte order, so a namespace prefix is one index range
        # whatever the database's collation.
        "create": (
            'CREATE TABLE IF NOT EXISTS {} (ns TEXT COLLATE "C" NOT NULL, '
            'key TEXT COLLATE "C" NOT NULL, value TEXT NOT NULL, '
            "created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL, "
            "expires_at DOUBLE PRECISION, ttl_seconds DOUBLE PRECISION, PRIMARY KEY (ns, key))"
        ),
        "index": "CREATE INDEX IF NOT EXISTS {idx} ON {} (expires_at) WHERE expires_at IS NOT NULL",
        "delete": "DELETE FROM {} WHERE ns = %s AND key = %s RETURNING expires_at",
        "put": (
            f"INSERT INTO {{}} AS i ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value, "
            "updated_at = excluded.updated_at, expires_at = excluded.expires_at, "
            "ttl_seconds = excluded.ttl_seconds, created_at = CASE WHEN "
            "i.expires_at <= excluded.updated_at THEN excluded.created_at ELSE i.created_at END"
        ),
        # Insert, or take over a row that has expired (it is gone for readers).
        "add": (
            f"INSERT INTO {{}} AS i ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value, "
            "created_at = excluded.created_at, updated_at = excluded.updated_at, "
            "expires_at = excluded.expires_at, ttl_seconds = excluded.ttl_seconds "
            "WHERE i.expires_at <= excluded.updated_at"
        ),
        "refresh": (
            "UPDATE {} SET expires_at = %s + ttl_seconds WHERE ns = %s AND key = ANY(%s) "
            "AND ttl_seconds IS NOT NULL AND expires_at > %s"
        ),
        "get": f"SELECT {_COLUMNS} FROM {{}} WHERE ns = %s AND key = ANY(%s) AND {_LIVE}",
        "namespaces": f"SELECT DISTINCT ns FROM {{}} WHERE ns >= %s AND ns < %s AND {_LIVE} ORDER BY ns",
        "delete_prefix": "DELETE FROM {} WHERE ns >= %s AND ns < %s",
        "purge": "DELETE FROM {} WHERE expires_at <= %s",
    }
    idx = sql.Identifier(f"idx_{table}_expires")
    return {name: sql.SQL(text).format(t, idx=idx) for name, text in q.items()}


class PostgresItemStore:
    """Items in a Postgres table, sharing a :class:`PostgresFactStore`'s pool (the
    :class:`~fastaiagent.facts.items.ItemStore` contract). A batch of writes is
    one transaction. Expiry uses the clients' clocks."""

    def __init__(self, store: PostgresFactStore, *, table: str | None = None) -> None:
        if not isinstance(store, PostgresFactStore):
            raise InvalidTypeError(f"PostgresItemStore needs a PostgresFactStore, got {type(store).__name__}")
        table = table or items_table_for(store.table)
        if not table.replace("_", "").isalnum() or not table[0].isalpha() or len(table) > 60:
            raise InvalidValueError(f"table {table!r} must be a plain identifier of at most 60 chars")
        self.store = store
        self.table = table
        self._ready = False
        self._writes = 0
        self._q = _queries(table)
        self._schema = Schema(f"items:{table}", [self._create_table])

    def __repr__(self) -> str:
        return f"PostgresItemStore(table={self.table!r})"

    def _create_table(self, conn: Any) -> None:
        """Schema step 1 (under the table's advisory lock, see facts/schema.py)."""
        with conn.transaction():
            conn.execute(self._q["create"])
            conn.execute(self._q["index"])

    def _run(self, operation: Any) -> Any:
        def run(conn: Any) -> Any:
            if not self._ready:
                where = f"the database at {redacted_url(self.store.url)}"
                migrate_postgres(conn, self._schema, self.table, where)
                self._ready = True
            return operation(conn)

        return self.store._run(run)

    def write(self, writes: Sequence[ItemWrite]) -> list[bool]:
        """Apply a batch in one transaction (see :class:`ItemStore`)."""
        batch = [check_write(w) for w in writes]
        if not batch:
            return []
        now = time.time()

        def apply(conn: Any) -> list[bool]:
            changed = []
            with conn.transaction():
                for w in batch:
                    ns = encode_namespace(w.namespace)
                    if w.value is None:
                        rows = conn.execute(self._q["delete"], (ns, w.key)).fetchall()
                        changed.append(any(r[0] is None or r[0] > now for r in rows))
                        continue
                    params = (ns, w.key, w.value, now, now, expiry(now, w.ttl_seconds), w.ttl_seconds)
                    cursor = conn.execute(self._q["add" if w.if_absent else "put"], params)
                    changed.append(cursor.rowcount == 1)
            return changed

        changed: list[bool] = self._run(apply)
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
        now = time.time()

        def read(conn: Any) -> list[Any]:
            if refresh_ttl:
                conn.execute(self._q["refresh"], (now, ns, wanted, now))
            return conn.execute(self._q["get"], (ns, wanted, now)).fetchall()

        found = {row[1]: _item(row) for row in self._run(read)}
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
        where, strings = scan_filter(prefix, exact=exact, before=before, mark="%s")
        params: list[Any] = list(strings)
        order = "DESC" if descending else "ASC"
        params += [time.time(), limit, offset]
        query = sql.SQL(
            f"SELECT {_COLUMNS} FROM {{}} WHERE {where} AND {_LIVE} "
            f"ORDER BY ns {order}, key {order} LIMIT %s OFFSET %s"
        ).format(sql.Identifier(self.table))
        return [_item(row) for row in self._run(lambda conn: conn.execute(query, params).fetchall())]

    def namespaces(self, prefix: Namespace = ()) -> list[Namespace]:
        """Namespaces with live items under ``prefix`` (see :class:`ItemStore`)."""
        params = (*prefix_range(prefix), time.time())
        rows = self._run(lambda conn: conn.execute(self._q["namespaces"], params).fetchall())
        return [decode_namespace(row[0]) for row in rows]

    def delete_prefix(self, prefix: Namespace) -> int:
        """Delete everything under ``prefix`` (see :class:`ItemStore`)."""
        params = prefix_range(prefix)
        return int(self._run(lambda conn: conn.execute(self._q["delete_prefix"], params).rowcount))

    def purge_expired(self) -> int:
        """Delete expired rows now; returns the count."""
        now = time.time()
        return int(self._run(lambda conn: conn.execute(self._q["purge"], (now,)).rowcount))

    def close(self) -> None:
        """Nothing to release: the pool belongs to the fact store."""
