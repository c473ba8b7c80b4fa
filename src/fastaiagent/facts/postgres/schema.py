"""The Postgres fact table's schema: created, upgraded in place, its indexes kept.

Version 1 is the layout written before versions were recorded; its step also
upgrades such a table (and older ones) in place. Version 2 adds the text index
over every row (``delete(fact=)`` removes history too). Version 3 the two times
of a fact (validity, ``superseded_at``) and their indexes. An existing table may
be large and busy, so its indexes are built ``CONCURRENTLY``: writers go on.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from fastaiagent._optional import require
from fastaiagent.facts.schema import (
    Schema,
    advisory_lock,
    in_transaction,
    migrate_postgres,
    run_ddl,
)
from fastaiagent.facts.scoping import normalize_text

psycopg = require("psycopg", "postgres")
from psycopg import sql  # noqa: E402  (imported after the extra check on purpose)

_CREATE_TABLE = (
    "CREATE TABLE IF NOT EXISTS {} ("
    "id BIGSERIAL PRIMARY KEY, fact TEXT NOT NULL, fact_key TEXT NOT NULL, "
    "scope TEXT NOT NULL, scope_id TEXT NOT NULL DEFAULT '', "
    "project_id TEXT NOT NULL DEFAULT '', "
    "confidence DOUBLE PRECISION NOT NULL DEFAULT 1.0, "
    "source TEXT NOT NULL DEFAULT 'manual', source_trace_id TEXT, "
    "created_at DOUBLE PRECISION NOT NULL, superseded_by BIGINT, "
    "metadata JSONB NOT NULL DEFAULT '{{}}'::jsonb, valid_from DOUBLE PRECISION, "
    "valid_to DOUBLE PRECISION, superseded_at DOUBLE PRECISION)"
)


def index_names(table: str) -> dict[str, str]:
    """The names of the store's indexes on ``table`` (the spec's names for the default)."""
    return {
        "subject_active": f"idx_{table}_subject_active",
        "scope_active": f"idx_{table}_scope_active",
        "active_key": f"idx_{table}_active_key",
        "subject_all": f"idx_{table}_subject_all",
        "text_all": f"idx_{table}_text_all",
        "subject_open": f"idx_{table}_subject_open",
        "subject_ending": f"idx_{table}_subject_ending",
        "expiry": f"idx_{table}_expiry",
        "retired": f"idx_{table}_retired",
        "replaced": f"idx_{table}_replaced",
    }


class FactTable:
    """The schema of one fact table: :meth:`ensure` brings it to this version."""

    def __init__(self, table: str, where: str) -> None:
        self.table = table
        self.where = where  # names the database in a migration error
        self._t = sql.Identifier(table)
        self.schema = Schema(
            f"facts:{table}", [self._set_up_table, self._add_text_index, self._add_times]
        )

    def ensure(self, conn: Any) -> None:
        """Migrate to this version when older; at this version, look the indexes up
        in pg_indexes (a read: with every index in place no DDL runs and no lock is
        taken) and rebuild one that was dropped by hand."""
        if migrate_postgres(conn, self.schema, self.table, self.where):
            return
        if self._complete(conn, index_names(self.table)):
            return
        with advisory_lock(conn, self.table):  # serialise with other workers' opens
            self._set_up_table(conn)

    def _set_up_table(self, conn: Any) -> None:
        """Schema step 1 (run under the table's advisory lock): create the table
        and its indexes, or bring an existing table to them."""
        names = index_names(self.table)
        exists = conn.execute("SELECT to_regclass(%s)", ('"' + self.table + '"',)).fetchone()[0]
        if exists is None:
            with conn.transaction():  # a new, empty table: plain DDL is instant
                conn.execute(sql.SQL(_CREATE_TABLE).format(self._t))
                for kind, name in names.items():
                    conn.execute(self._index_ddl(kind, name))
            return
        # An existing table may be large and busy: build indexes CONCURRENTLY,
        # so writers are never blocked while they build.
        self._add_time_columns(conn)
        present = self._present_indexes(conn)
        if names["active_key"] not in present:
            with conn.transaction():
                self._upgrade_table(conn)
        for kind, name in names.items():
            if name not in present:
                self._build_concurrently(conn, kind, name)

    def _add_text_index(self, conn: Any) -> None:
        """Schema step 2: every row of a subject by text, active or superseded, so
        ``delete(fact=)`` finds history too. Built ``CONCURRENTLY`` (writers go on);
        a table that step 1 just created has it already."""
        name = index_names(self.table)["text_all"]
        if name not in self._present_indexes(conn):
            self._build_concurrently(conn, "text_all", name)

    def _add_time_columns(self, conn: Any) -> None:
        """The columns of the two times (nullable: adding them rewrites nothing), and
        ``superseded_at`` of history filled from each replacement's ``created_at``."""
        t = self._t
        present = {
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE "
                "table_schema = current_schema() AND table_name = %s",
                (self.table,),
            )
        }
        missing = [c for c in ("valid_from", "valid_to", "superseded_at") if c not in present]
        if not missing:  # no DDL (its lock would queue behind every open transaction)
            return
        with conn.transaction():
            for column in missing:
                conn.execute(
                    sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} DOUBLE PRECISION").format(
                        t, sql.Identifier(column)
                    )
                )
        conn.execute(
            sql.SQL(
                "UPDATE {t} o SET superseded_at = n.created_at FROM {t} n "
                "WHERE o.superseded_by = n.id AND o.superseded_at IS NULL"
            ).format(t=t)
        )

    def _add_times(self, conn: Any) -> None:
        """Schema step 3: the two times of a fact, their indexes built ``CONCURRENTLY``."""
        self._add_time_columns(conn)
        present = self._present_indexes(conn)
        for kind in ("subject_open", "subject_ending", "expiry", "retired", "replaced"):
            name = index_names(self.table)[kind]
            if name not in present:
                self._build_concurrently(conn, kind, name)

    def _build_concurrently(self, conn: Any, kind: str, name: str) -> None:
        drop = sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name))
        run_ddl(conn, drop)  # an invalid leftover of an interrupted build
        try:
            with conn.transaction() if in_transaction(conn) else nullcontext():  # a savepoint
                run_ddl(conn, self._index_ddl(kind, name, concurrently=True))
        except psycopg.errors.UniqueViolation:
            # An older writer added a duplicate while the index built: fold, retry once.
            run_ddl(conn, drop)
            with conn.transaction():
                self._upgrade_table(conn)
            run_ddl(conn, self._index_ddl(kind, name, concurrently=True))

    def _upgrade_table(self, conn: Any) -> None:
        """Prepare a table written by an older SDK for the unique active-key index:
        add and fill ``fact_key`` when it is missing, and fold duplicate active
        rows of one text into the oldest (the others stay as its history)."""
        t = self._t
        has_key = conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name = %s AND column_name = 'fact_key'",
            (self.table,),
        ).fetchone()
        if not has_key:
            conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN fact_key TEXT").format(t))
        missing = conn.execute(
            sql.SQL("SELECT id, fact FROM {} WHERE fact_key IS NULL").format(t)
        ).fetchall()
        if missing:
            with conn.cursor() as cur:
                cur.executemany(
                    sql.SQL("UPDATE {} SET fact_key = %s WHERE id = %s").format(t),
                    [(normalize_text(fact), fact_id) for fact_id, fact in missing],
                )
        conn.execute(
            sql.SQL(
                "UPDATE {t} SET superseded_by = d.keep FROM ("
                "SELECT id, first_value(id) OVER (PARTITION BY scope, scope_id, project_id, "
                "md5(fact_key) ORDER BY id) AS keep FROM {t} WHERE superseded_by IS NULL) d "
                "WHERE {t}.id = d.id AND d.id <> d.keep"
            ).format(t=t)
        )

    def _present_indexes(self, conn: Any) -> set[str]:
        """Valid indexes on the table (an interrupted CONCURRENTLY build leaves an invalid one)."""
        rows = conn.execute(
            "SELECT p.indexname FROM pg_indexes p "
            "JOIN pg_class c ON c.relname = p.indexname "
            "JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = p.schemaname "
            "JOIN pg_index i ON i.indexrelid = c.oid "
            "WHERE p.schemaname = current_schema() AND p.tablename = %s AND i.indisvalid",
            (self.table,),
        ).fetchall()
        return {row[0] for row in rows}

    def _complete(self, conn: Any, names: dict[str, str]) -> bool:
        return set(names.values()) <= self._present_indexes(conn)

    def _index_ddl(self, kind: str, name: str, *, concurrently: bool = False) -> Any:
        columns = {
            "subject_active": "(scope, scope_id, project_id, created_at DESC) "
            "WHERE superseded_by IS NULL",
            "scope_active": "(scope, project_id, created_at DESC) WHERE superseded_by IS NULL",
            "active_key": "(scope, scope_id, project_id, md5(fact_key)) "
            "WHERE superseded_by IS NULL",
            "subject_all": "(scope, scope_id, project_id)",
            # The text leads: one subject's text and one text across a scope ("*")
            # are both a prefix. md5 keeps entries small (texts run to 10,000 chars).
            "text_all": "(md5(fact_key), scope, project_id, scope_id)",
            # The per-turn read: open-ended facts newest first, and apart from them the
            # facts with an end by valid_to, so expired ones are never read.
            "subject_open": "(scope, scope_id, project_id, created_at DESC, id DESC) "
            "WHERE superseded_by IS NULL AND valid_to IS NULL",
            "subject_ending": "(scope, scope_id, project_id, valid_to) "
            "WHERE superseded_by IS NULL AND valid_to IS NOT NULL",
            # The retention job and a fact's history.
            "expiry": "(valid_to) WHERE superseded_by IS NULL AND valid_to IS NOT NULL",
            "retired": "(superseded_at) WHERE superseded_by IS NOT NULL",
            "replaced": "(superseded_by) WHERE superseded_by IS NOT NULL",
        }[kind]
        unique = "UNIQUE " if kind == "active_key" else ""
        how = "CONCURRENTLY " if concurrently else ""
        return sql.SQL("CREATE {}INDEX {}IF NOT EXISTS {} ON {} " + columns).format(
            sql.SQL(unique), sql.SQL(how), sql.Identifier(name), self._t
        )
