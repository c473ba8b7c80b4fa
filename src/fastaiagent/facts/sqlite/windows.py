"""Shared windows in the fact store's SQLite file (same connections, own table)."""

from __future__ import annotations

import threading
import time
from typing import Any

from fastaiagent._schema import Schema
from fastaiagent._sqlite import migrate
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.sqlite.store import SQLiteFactStore
from fastaiagent.facts.windows import StoredWindow, WindowKey, check_key, check_user, new_version

DEFAULT_TABLE = "conversation_windows"
PURGE_EVERY = 500  # writes between sweeps of expired rows (reads ignore them anyway)

# Version 1 is the layout written before versions were recorded (IF NOT EXISTS:
# it also upgrades such a file).
_V1 = """
CREATE TABLE IF NOT EXISTS {t} (
    agent_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    version TEXT NOT NULL,
    state TEXT NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL,
    PRIMARY KEY (agent_id, project_id, user_id)
);
CREATE INDEX IF NOT EXISTS idx_{t}_expires ON {t} (expires_at) WHERE expires_at IS NOT NULL;
"""


# Version 2: forget of a user deletes their windows of every agent by (project, user).
_V2 = "CREATE INDEX IF NOT EXISTS idx_{t}_user ON {t} (project_id, user_id);"


def windows_schema(table: str) -> Schema:
    """The migrations of a windows table (component ``windows:<table>``)."""
    return Schema(f"windows:{table}", [_V1.format(t=table), _V2.format(t=table)])


class SQLiteWindowStore:
    """Windows in a table of a :class:`~fastaiagent.facts.sqlite.store.SQLiteFactStore` file.

    Several processes on one machine can share the file (WAL mode); writes are
    compare-and-set in one statement, so no lock is held across a turn.
    """

    def __init__(self, store: SQLiteFactStore, *, table: str = DEFAULT_TABLE) -> None:
        if not isinstance(store, SQLiteFactStore):
            raise InvalidTypeError(f"SQLiteWindowStore needs a SQLiteFactStore, got {type(store).__name__}")
        if not table.replace("_", "").isalnum() or not table[0].isalpha():
            raise InvalidValueError(f"table {table!r} must be a plain identifier")
        self.store = store
        self.table = table
        self._ready = False
        self._lock = threading.Lock()
        self._writes = 0

    def __repr__(self) -> str:
        return f"SQLiteWindowStore(path={str(self.store.path)!r}, table={self.table!r})"

    def _conn(self) -> Any:
        conn = self.store._connection()
        if not self._ready:
            with self._lock:
                if not self._ready:
                    migrate(conn, windows_schema(self.table), str(self.store.path))
                    self._ready = True
        return conn

    def _execute_write(self, query: str, params: Any) -> int:
        """One write under BEGIN IMMEDIATE: in WAL mode a plain autocommit write can
        fail at once with SQLITE_BUSY when another process committed meanwhile,
        while an immediate transaction waits for the lock (busy_timeout)."""
        self._conn()
        with self.store._write() as conn:
            return int(conn.execute(query, params).rowcount)

    def load(self, key: WindowKey, known_version: str | None = None) -> StoredWindow | None:
        """The live stored window (see :class:`WindowStore`)."""
        check_key(key)
        row = self._conn().execute(
            f"SELECT version, CASE WHEN version = ? THEN NULL ELSE state END FROM {self.table} "
            "WHERE agent_id = ? AND project_id = ? AND user_id = ? "
            "AND (expires_at IS NULL OR expires_at > ?)",
            (known_version or "", *key, time.time()),
        ).fetchone()
        return StoredWindow(row[0], row[1]) if row else None

    def save(
        self, key: WindowKey, state: str, expected_version: str | None, ttl_seconds: float | None
    ) -> str | None:
        """Compare-and-set write (see :class:`WindowStore`)."""
        check_key(key)
        now, version = time.time(), new_version()
        expires = None if ttl_seconds is None else now + ttl_seconds
        if expected_version is None:
            # Create, or take over a row that has expired (it is gone for readers).
            # Finding our own new version means this is a repeat of a write that landed.
            count = self._execute_write(
                f"INSERT INTO {self.table} (agent_id, project_id, user_id, version, state, "
                "updated_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (agent_id, project_id, user_id) DO UPDATE SET "
                "version = excluded.version, state = excluded.state, "
                "updated_at = excluded.updated_at, expires_at = excluded.expires_at "
                f"WHERE ({self.table}.expires_at IS NOT NULL AND {self.table}.expires_at <= ?) "
                f"OR {self.table}.version = excluded.version",
                (*key, version, state, now, expires, now),
            )
        else:
            count = self._execute_write(
                f"UPDATE {self.table} SET version = ?, state = ?, updated_at = ?, expires_at = ? "
                "WHERE agent_id = ? AND project_id = ? AND user_id = ? AND version IN (?, ?)",
                (version, state, now, expires, *key, expected_version, version),
            )
        if count != 1:
            return None
        self._writes += 1
        if self._writes % PURGE_EVERY == 0:
            self.purge_expired()
        return version

    def delete(self, key: WindowKey) -> bool:
        """Delete one window (see :class:`WindowStore`)."""
        check_key(key)
        return self._execute_write(
            f"DELETE FROM {self.table} WHERE agent_id = ? AND project_id = ? AND user_id = ?", key
        ) > 0

    def delete_all(self, agent_id: str, project_id: str) -> int:
        """Delete an agent and project's windows (see :class:`WindowStore`)."""
        return self._execute_write(
            f"DELETE FROM {self.table} WHERE agent_id = ? AND project_id = ?", (agent_id, project_id)
        )

    def delete_user(self, project_id: str, user_id: str) -> int:
        """Delete a user's windows of every agent (see :class:`WindowStore`)."""
        check_user(project_id, user_id)
        return self._execute_write(
            f"DELETE FROM {self.table} WHERE project_id = ? AND user_id = ?", (project_id, user_id)
        )

    def purge_expired(self) -> int:
        """Delete rows past their TTL now; returns the count."""
        return self._execute_write(
            f"DELETE FROM {self.table} WHERE expires_at IS NOT NULL AND expires_at <= ?",
            (time.time(),),
        )

    def close(self) -> None:
        """Nothing to release: the connections belong to the fact store."""
