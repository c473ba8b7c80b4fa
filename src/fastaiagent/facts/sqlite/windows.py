"""Shared windows in the fact store's SQLite file (same connections, own table)."""

from __future__ import annotations

import time

from fastaiagent._schema import Schema
from fastaiagent.facts.sql_clauses import equal_clauses
from fastaiagent.facts.sqlite.store import SQLiteFactStore, SQLiteTable
from fastaiagent.facts.windows import PURGE_EVERY, StoredWindow, WindowFront, WindowKey

DEFAULT_TABLE = "conversation_windows"

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


class SQLiteWindowStore(SQLiteTable, WindowFront):
    """Windows in a table of a :class:`~fastaiagent.facts.sqlite.store.SQLiteFactStore` file.

    Several processes on one machine can share the file (WAL mode); writes are
    compare-and-set in one statement, so no lock is held across a turn.
    """

    purge_every = PURGE_EVERY

    def __init__(self, store: SQLiteFactStore, *, table: str = DEFAULT_TABLE) -> None:
        super().__init__(store, table, windows_schema(table))

    def load_window(self, key: WindowKey, known_version: str | None) -> StoredWindow | None:
        """The live stored window (see :class:`WindowStore`)."""
        row = (
            self._conn()
            .execute(
                f"SELECT version, CASE WHEN version = ? THEN NULL ELSE state END FROM {self.table} "
                "WHERE agent_id = ? AND project_id = ? AND user_id = ? "
                "AND (expires_at IS NULL OR expires_at > ?)",
                (known_version or "", *key, time.time()),
            )
            .fetchone()
        )
        return StoredWindow(row[0], row[1]) if row else None

    def save_window(
        self,
        key: WindowKey,
        state: str,
        expected_version: str | None,
        ttl_seconds: float | None,
        version: str,
    ) -> bool:
        """Compare-and-set write in one statement (see :class:`WindowStore`)."""
        now = time.time()
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
        return count == 1

    def window_keys(self, project_id: str | None = None, user_id: str | None = None) -> list[WindowKey]:
        """The keys of the live windows (of one project, of one user), sorted."""
        clauses, params = equal_clauses((("project_id", project_id), ("user_id", user_id)), mark="?")
        where = " AND ".join(["(expires_at IS NULL OR expires_at > ?)", *clauses])
        rows = self._conn().execute(
            f"SELECT agent_id, project_id, user_id FROM {self.table} WHERE {where} "
            "ORDER BY agent_id, project_id, user_id",
            [time.time(), *params],
        )
        return [WindowKey(*row) for row in rows]

    def delete_window(self, key: WindowKey) -> bool:
        """Delete one window (see :class:`WindowStore`)."""
        return (
            self._execute_write(
                f"DELETE FROM {self.table} WHERE agent_id = ? AND project_id = ? AND user_id = ?",
                key,
            )
            > 0
        )

    def delete_all(self, agent_id: str, project_id: str) -> int:
        """Delete an agent and project's windows (see :class:`WindowStore`)."""
        return self._execute_write(
            f"DELETE FROM {self.table} WHERE agent_id = ? AND project_id = ?",
            (agent_id, project_id),
        )

    def delete_user_windows(self, project_id: str, user_id: str) -> int:
        """Delete a user's windows of every agent (see :class:`WindowStore`)."""
        return self._execute_write(
            f"DELETE FROM {self.table} WHERE project_id = ? AND user_id = ?", (project_id, user_id)
        )

    def purge_expired(self) -> int:
        """Delete rows past their TTL now; returns the count."""
        return self._execute_write(
            f"DELETE FROM {self.table} WHERE expires_at IS NOT NULL AND expires_at <= ?",
            (time.time(),),
        )
