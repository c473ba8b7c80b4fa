"""Shared windows in Postgres, on the fact store's per-process connection pool."""

from __future__ import annotations

from typing import Any

from fastaiagent.facts.postgres.store import DEFAULT_TABLE as DEFAULT_FACT_TABLE
from fastaiagent.facts.postgres.store import PostgresFactStore, PostgresTable, sql
from fastaiagent.facts.schema import Schema
from fastaiagent.facts.sql_clauses import equal_clauses
from fastaiagent.facts.windows import PURGE_EVERY, StoredWindow, WindowFront, WindowKey

DEFAULT_TABLE = "conversation_windows"


def windows_table_for(fact_table: str) -> str:
    """The windows table that goes with a fact table (a custom fact table gets its own)."""
    return DEFAULT_TABLE if fact_table == DEFAULT_FACT_TABLE else f"{fact_table}_windows"


class PostgresWindowStore(PostgresTable, WindowFront):
    """Windows in a Postgres table, sharing a :class:`PostgresFactStore`'s pool
    (so a store made before a fork opens its own pool in each worker).

    Expiry uses the server's clock, so workers with skewed clocks agree.
    """

    purge_every = PURGE_EVERY

    def __init__(self, store: PostgresFactStore, *, table: str | None = None) -> None:
        super().__init__(store, table, windows_table_for)
        self._q = self._queries(self.table)
        # Version 1 is the layout written before versions were recorded (IF NOT
        # EXISTS: its step also upgrades such a table).
        self._schema = Schema(f"windows:{self.table}", [self._create_table, self._index_users])

    @staticmethod
    def _queries(table: str) -> dict[str, Any]:
        t = sql.Identifier(table)
        live = "(expires_at IS NULL OR expires_at > now())"
        return {
            "create": sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (agent_id TEXT NOT NULL, project_id TEXT NOT NULL, "
                "user_id TEXT NOT NULL, version TEXT NOT NULL, state TEXT NOT NULL, "
                "updated_at TIMESTAMPTZ NOT NULL DEFAULT now(), expires_at TIMESTAMPTZ, "
                "PRIMARY KEY (agent_id, project_id, user_id))"
            ).format(t),
            "index": sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON {} (expires_at) WHERE expires_at IS NOT NULL"
            ).format(sql.Identifier(f"idx_{table}_expires"), t),
            "load": sql.SQL(
                "SELECT version, CASE WHEN version = %s THEN NULL ELSE state END FROM {} "
                "WHERE agent_id = %s AND project_id = %s AND user_id = %s AND " + live
            ).format(t),
            # A retried statement (after a dropped connection) finds its own version
            # already written and succeeds again instead of reporting a conflict.
            "create_row": sql.SQL(
                "INSERT INTO {} AS w (agent_id, project_id, user_id, version, state, updated_at, "
                "expires_at) VALUES (%s, %s, %s, %s, %s, now(), now() + make_interval(secs => %s)) "
                "ON CONFLICT (agent_id, project_id, user_id) DO UPDATE SET version = excluded.version, "
                "state = excluded.state, updated_at = now(), expires_at = excluded.expires_at "
                "WHERE w.expires_at <= now() OR w.version = excluded.version"
            ).format(t),
            "update_row": sql.SQL(
                "UPDATE {} SET version = %s, state = %s, updated_at = now(), "
                "expires_at = now() + make_interval(secs => %s) "
                "WHERE agent_id = %s AND project_id = %s AND user_id = %s AND version IN (%s, %s)"
            ).format(t),
            "delete": sql.SQL(
                "DELETE FROM {} WHERE agent_id = %s AND project_id = %s AND user_id = %s"
            ).format(t),
            "delete_all": sql.SQL("DELETE FROM {} WHERE agent_id = %s AND project_id = %s").format(t),
            "user_index": sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (project_id, user_id)").format(
                sql.Identifier(f"idx_{table}_user"), t
            ),
            "delete_user": sql.SQL("DELETE FROM {} WHERE project_id = %s AND user_id = %s").format(t),
            "purge": sql.SQL("DELETE FROM {} WHERE expires_at <= now()").format(t),
        }

    def _index_users(self, conn: Any) -> None:
        """Schema step 2: forget of a user deletes their windows of every agent by
        (project, user). The table holds one row per live conversation, so the
        build is short."""
        with conn.transaction():
            conn.execute(self._q["user_index"])

    def _execute(self, query: str, params: tuple[Any, ...]) -> Any:
        def operation(conn: Any) -> Any:
            cursor = conn.execute(self._q[query], params)
            return cursor.fetchone() if query == "load" else cursor.rowcount

        return self._run(operation)

    def load_window(self, key: WindowKey, known_version: str | None) -> StoredWindow | None:
        """The live stored window (see :class:`WindowStore`)."""
        row = self._execute("load", (known_version or "", *key))
        return StoredWindow(row[0], row[1]) if row else None

    def save_window(
        self, key: WindowKey, state: str, expected_version: str | None, ttl_seconds: float | None, version: str
    ) -> bool:
        """Compare-and-set write in one statement (see :class:`WindowStore`)."""
        if expected_version is None:
            count = self._execute("create_row", (*key, version, state, ttl_seconds))
        else:
            count = self._execute(
                "update_row", (version, state, ttl_seconds, *key, expected_version, version)
            )
        return bool(count == 1)

    def window_keys(self, project_id: str | None = None, user_id: str | None = None) -> list[WindowKey]:
        """The keys of the live windows (of one project, of one user), sorted."""
        clauses, params = equal_clauses((("project_id", project_id), ("user_id", user_id)), mark="%s")
        where = " AND ".join(["(expires_at IS NULL OR expires_at > now())", *clauses])
        query = sql.SQL(
            "SELECT agent_id, project_id, user_id FROM {} WHERE " + where
            + " ORDER BY agent_id, project_id, user_id"
        ).format(sql.Identifier(self.table))
        rows = self._run(lambda conn: conn.execute(query, params).fetchall())
        return [WindowKey(*row) for row in rows]

    def delete_window(self, key: WindowKey) -> bool:
        """Delete one window (see :class:`WindowStore`)."""
        return bool(self._execute("delete", tuple(key)))

    def delete_all(self, agent_id: str, project_id: str) -> int:
        """Delete an agent and project's windows (see :class:`WindowStore`)."""
        return int(self._execute("delete_all", (agent_id, project_id)))

    def delete_user_windows(self, project_id: str, user_id: str) -> int:
        """Delete a user's windows of every agent (see :class:`WindowStore`)."""
        return int(self._execute("delete_user", (project_id, user_id)))

    def purge_expired(self) -> int:
        """Delete rows past their TTL now (reads already ignore them); returns the count."""
        return int(self._execute("purge", ()))
