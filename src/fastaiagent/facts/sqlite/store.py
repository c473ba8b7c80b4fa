"""SQLiteFactStore: the default fact store, a local SQLite file."""

from __future__ import annotations

import functools
import inspect
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fastaiagent._paths import default_db_path
from fastaiagent._schema import Schema
from fastaiagent._sqlite import ThreadConnections, migrate
from fastaiagent._validate import integer
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.capabilities import StoreCapabilities
from fastaiagent.facts.fact import (
    SOURCE_CONVERSATION,
    SOURCE_MANUAL,
    Fact,
    UsualMetadata,
    current_source,
    metadata_from_text,
)
from fastaiagent.facts.scoping import (
    Selector,
    check_fact_id,
    check_fact_text,
    check_supersede,
    delete_selector,
    normalize_text,
    read_selector,
    validate_for_write,
)
from fastaiagent.facts.sql_clauses import (
    FACT_COLUMNS,
    as_of_clause,
    browse_where,
    fact_values,
    insert_fact,
    selector_where,
    valid_clause,
)
from fastaiagent.facts.sqlite.subject_reads import UNKEPT, Change, Row, SubjectReads, kept_rows
from fastaiagent.facts.store import DELETE_BATCH, BrowseFilter, StoreFront, SubjectCount
from fastaiagent.facts.validity import history_cutoff, moment_or_now
from fastaiagent.trace.store import SQLiteFile, WriteTransaction, sqlite_failure

# Version 1 is the layout written before versions were recorded (so it is also
# the step that upgrades such a file: every statement is IF [NOT] EXISTS).
_V1 = """
CREATE TABLE IF NOT EXISTS learned_memory (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    fact TEXT NOT NULL,
    fact_key TEXT NOT NULL,
    scope TEXT NOT NULL,
    scope_id TEXT NOT NULL DEFAULT '',
    project_id TEXT NOT NULL DEFAULT '',
    confidence REAL NOT NULL DEFAULT 1.0,
    source TEXT NOT NULL DEFAULT 'manual',
    source_trace_id TEXT,
    created_at REAL NOT NULL,
    superseded_by INTEGER,
    metadata TEXT NOT NULL DEFAULT '{}'
);
CREATE UNIQUE INDEX IF NOT EXISTS idx_learned_memory_active_key
    ON learned_memory (scope, scope_id, project_id, fact_key) WHERE superseded_by IS NULL;
DROP INDEX IF EXISTS idx_learned_memory_subject_active;
CREATE INDEX IF NOT EXISTS idx_learned_memory_scope_active
    ON learned_memory (scope, project_id, created_at DESC, id DESC)
    WHERE superseded_by IS NULL;
CREATE INDEX IF NOT EXISTS idx_learned_memory_subject_all
    ON learned_memory (scope, scope_id, project_id);
CREATE INDEX IF NOT EXISTS idx_learned_memory_subject_read
    ON learned_memory (scope_id, scope, project_id, created_at DESC, id DESC, fact, confidence,
                       source, source_trace_id, metadata, superseded_by)
    WHERE superseded_by IS NULL;
"""
# idx_learned_memory_subject_read serves the per-turn read (one subject's active facts,
# newest first) from the index alone: it holds every column that read returns, and
# superseded_by too, since SQLite only treats an index as covering when it holds every
# column the query names. scope_id leads so reads of a whole scope (no scope_id) cannot
# pick it and sort; they keep idx_learned_memory_scope_active, which is in their order.
# It costs a second copy of each active fact; it replaces the narrower subject index of
# earlier versions (dropped at open), which would only slow every add. An existing
# database gets it at its first open (about 2 s per million facts, once).

# Version 2: every row of a text, active or superseded, by index, so delete(fact=)
# removes them all (a forgotten text must not stay in history) without a scan.
# fact_key leads: a subject's text and one text across a scope ("*") are both a
# prefix, and no read without a text can pick this index over the read indexes.
_V2 = """
CREATE INDEX IF NOT EXISTS idx_learned_memory_text_all
    ON learned_memory (fact_key, scope, project_id, scope_id);
"""

# Version 3: the two times of a fact. Recorded: created_at and superseded_at (filled
# here from each replacement's created_at). Valid: valid_from / valid_to. The per-turn
# read keeps its covering partial index over active rows, now holding valid_from and
# valid_to too, so validity is checked on index entries (never a table row) and a
# subject with no expired facts reads exactly as before; an expired entry newer than
# the page costs a skip in the index until the retention job prunes it. Two small
# partial indexes serve that job (expired by valid_to, superseded by superseded_at),
# one the history of a fact (its previous versions by superseded_by).
_V3 = """
ALTER TABLE learned_memory ADD COLUMN valid_from REAL;
ALTER TABLE learned_memory ADD COLUMN valid_to REAL;
ALTER TABLE learned_memory ADD COLUMN superseded_at REAL;
UPDATE learned_memory SET superseded_at = (
    SELECT n.created_at FROM learned_memory n WHERE n.id = learned_memory.superseded_by)
    WHERE superseded_by IS NOT NULL;
DROP INDEX IF EXISTS idx_learned_memory_subject_read;
CREATE INDEX idx_learned_memory_subject_live
    ON learned_memory (scope_id, scope, project_id, created_at DESC, id DESC, fact, confidence,
                       source, source_trace_id, metadata, superseded_by, valid_from, valid_to)
    WHERE superseded_by IS NULL;
CREATE INDEX idx_learned_memory_expiry ON learned_memory (valid_to)
    WHERE superseded_by IS NULL AND valid_to IS NOT NULL;
CREATE INDEX idx_learned_memory_retired ON learned_memory (superseded_at)
    WHERE superseded_by IS NOT NULL;
CREATE INDEX idx_learned_memory_replaced ON learned_memory (superseded_by)
    WHERE superseded_by IS NOT NULL;
"""

# Version 4: one index where two were written on every add. A subject's rows, and its
# rows of one text (delete(fact=), history too), are both prefixes of
# (scope, scope_id, project_id, fact_key); it replaces idx_learned_memory_subject_all
# and idx_learned_memory_text_all, which cost an add ~10 us (~13%). One text across a
# whole scope ("*", an admin delete) now reads the scope's entries of this index
# (never the table) instead of going straight to the text.
_V4 = """
DROP INDEX IF EXISTS idx_learned_memory_text_all;
DROP INDEX IF EXISTS idx_learned_memory_subject_all;
CREATE INDEX idx_learned_memory_subject_texts
    ON learned_memory (scope, scope_id, project_id, fact_key);
"""

FACTS_SCHEMA = Schema("facts:learned_memory", [_V1, _V2, _V3, _V4])
"""The fact table's migrations (see :mod:`fastaiagent._schema`); version 4 today."""

# In Fact's field order, so rows build facts positionally (the per-turn hot path).
_COLUMNS = ", ".join(FACT_COLUMNS)
_INSERT = insert_fact("learned_memory", "?")
_INSERT_NEW = (
    _INSERT + " ON CONFLICT (scope, scope_id, project_id, fact_key) WHERE superseded_by IS NULL DO NOTHING"
)
_DELETE_PAUSE = 0.002  # seconds the write lock is left free between delete steps, at least
STEP_BUDGET = 0.008  # seconds a step of a long write job aims to hold the write lock
MMAP_BYTES = 1024 * 2**20
"""The part of the database file each connection reads through mmap (SQLite's
``mmap_size``): reads straight from the OS page cache, no syscall per page, and
pages read stay mapped (RSS of the file, reclaimable by the OS). Read when a
store is made; 0 turns mmap off."""
_MIN_STEP, _MAX_STEP = 20, 2_000  # rows a step of it removes, at least and at most


class WriteSteps:
    """Called before each step of a long write job (a delete in steps): leaves the
    write lock free for twice as long as the last step held it (at least
    :data:`_DELETE_PAUSE`). Other connections wait for the lock by polling (after
    1, 2, 5, 10 ms ... up to 100 ms): back-to-back steps would starve them.

    ``rows`` is the size of the next step: it follows the time the last one took
    towards :data:`STEP_BUDGET` (a row's cost varies tenfold with FTS5's merges
    and the machine's load, so a fixed count is either slow or long).
    """

    def __init__(self, rows: int = 100) -> None:
        self._started: float | None = None
        self.rows = rows

    def __call__(self) -> None:
        if self._started is not None:
            took = time.perf_counter() - self._started
            self.rows = max(
                _MIN_STEP, min(_MAX_STEP, int(self.rows * STEP_BUDGET / max(took, 1e-4)))
            )
            time.sleep(max(_DELETE_PAUSE, 2 * took))
        self._started = time.perf_counter()


def _row_to_fact(row: tuple[Any, ...]) -> Fact:
    return Fact(
        row[0], row[1], row[2], row[3], row[4], current_source(row[5]), row[6],
        metadata_from_text(row[7]), *row[8:],
    )  # fmt: skip


# The per-turn read: one subject's active facts valid at a moment, newest first,
# answered from idx_learned_memory_subject_live alone. Its scope, id and project are
# known, so only the varying columns come back, and the usual values come back as NULL
# (or 0: the store's usual metadata, ?4): a NULL or a small int costs the sqlite3
# module no object, a repeated 'manual' or '{"agent_id": ...}' costs a new str each row.
# A source's old name is read as today's here (RENAMED_SOURCES), not per fact in Python.
_SUBJECT_FIELDS = (
    "SELECT fact, confidence, CASE source WHEN 'manual' THEN NULL WHEN 'learn' THEN 'traces' "
    "ELSE source END, source_trace_id, "
    "CASE metadata WHEN '{}' THEN NULL WHEN ?4 THEN 0 ELSE metadata END, id, created_at, "
    "valid_from, valid_to FROM learned_memory INDEXED BY idx_learned_memory_subject_live "
    "WHERE scope_id = ?1 AND scope = ?2 AND project_id = ?3 AND superseded_by IS NULL "
)
_NEWEST = "ORDER BY created_at DESC, id DESC LIMIT ?{} OFFSET ?{}"
_SUBJECT_READ = (
    _SUBJECT_FIELDS + "AND (valid_to IS NULL OR valid_to > ?5) "
    "AND (valid_from IS NULL OR valid_from <= ?5) " + _NEWEST.format(6, 7)
)
_SUBJECT_ALL = _SUBJECT_FIELDS + _NEWEST.format(5, 6)  # include_expired=True
# Whether a subject has no active fact but one (the one its write just added).
_SUBJECT_PROBE = (
    "SELECT count(*) FROM (SELECT 1 FROM learned_memory INDEXED BY idx_learned_memory_subject_live "
    "WHERE scope_id = ?1 AND scope = ?2 AND project_id = ?3 AND superseded_by IS NULL LIMIT 2)"
)


def _kept_row(values: tuple[Any, ...], fact_id: int, usual: str) -> Row:
    """The row of _SUBJECT_FIELDS a read returns for a fact just stored (``values``:
    its insert's parameters, :func:`fact_values`), its metadata encoded against
    ``usual`` (?4); the REAL columns come back as floats."""
    text, _, _, _, _, confidence, source, trace_id, created_at, metadata, valid_from, valid_to = values
    return (
        text, float(confidence), None if source == SOURCE_MANUAL else current_source(source), trace_id,
        None if metadata == "{}" else 0 if metadata == usual else metadata, fact_id, float(created_at),
        None if valid_from is None else float(valid_from), None if valid_to is None else float(valid_to),
    )  # fmt: skip


def _subject_facts(
    rows: list[tuple[Any, ...]], scope: str, scope_id: str, project_id: str, usual: dict[str, Any]
) -> list[Fact]:
    # Rows of this store's own file, so the fields are set straight, without the
    # call of Fact's __init__ (which checks nothing): a third of building 20 facts.
    # Every field is set (tests/unit/test_sqlite_subject_reads.py holds it to Fact's).
    loads, new, facts = metadata_from_text, object.__new__, []
    for fact, confidence, source, trace_id, metadata, fact_id, created_at, valid_from, valid_to in rows:
        made = new(Fact)
        made.fact = fact
        made.scope = scope
        made.scope_id = scope_id
        made.project_id = project_id
        made.confidence = confidence
        made.source = SOURCE_MANUAL if source is None else source
        made.source_trace_id = trace_id
        made.metadata = usual.copy() if metadata == 0 else loads(metadata)
        made.id = fact_id
        made.created_at = created_at
        made.superseded_by = None
        made.valid_from = valid_from
        made.valid_to = valid_to
        made.superseded_at = None
        facts.append(made)
    return facts


def _where(selector: Selector, *, active_only: bool) -> tuple[str, list[Any]]:
    return selector_where(selector, active_only=active_only, mark="?")


class SQLiteFactStore(SQLiteFile, StoreFront, StoreCapabilities):
    """SQLite fact store (the default ``location="sqlite"``).

    ``path=None`` means ``$FASTAIAGENT_LOCAL_DB`` or ``.fastaiagent/local.db``
    under the working directory, resolved to an absolute path once, at first
    use; constructing the store touches no file. The default location's folder
    is created when missing; an explicit ``path`` whose folder does not exist
    raises :class:`~fastaiagent.errors.NotFoundError` at first use. Each thread
    reuses its own connection; the database runs in WAL mode so readers never
    wait for a writer. The first connection checks the schema version (see
    ``docs/backends.md``, "Schema versions").
    """

    backend = "sqlite"
    backend_class = "SQLite"

    delete_batch: int = 200
    """Rows one step of :meth:`delete` removes at most (one write transaction of
    about a millisecond). Between steps the lock is left free for twice as long
    as the step took (2 ms at least), so other writers, which poll for it, get
    in: a huge delete takes longer, but no other write waits long."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, timeout: float = 30.0):
        self._explicit_path = Path(path).expanduser() if path is not None else None
        self._path: Path | None = None
        self._lock = threading.Lock()
        self._usual = UsualMetadata()
        self._usual_text_only: tuple[str, dict[str, Any]] | None = None  # a usual all text
        self._reads = SubjectReads(_kept_row)
        self._wrote = self._reads.wrote  # bound once: a write allocates no callback
        self._timeout = timeout
        self._db = self._connections()

    def _connections(self) -> ThreadConnections:
        """The per-thread connections, the fact table checked on the first."""
        # mmap: reads straight from the OS page cache, no extra syscalls on a large table.
        return ThreadConnections(
            lambda: self.path,
            [FACTS_SCHEMA],
            timeout=self._timeout,
            pragmas=[f"PRAGMA mmap_size={integer('MMAP_BYTES', MMAP_BYTES, minimum=0)}"],
            create_folder=self._explicit_path is None,
        )

    def __repr__(self) -> str:
        return f"SQLiteFactStore(path={str(self._path or self._explicit_path or '<default>')!r})"

    @property
    def path(self) -> Path:
        """The absolute database path, resolved on first access."""
        if self._path is None:
            with self._lock:
                if self._path is None:
                    chosen = self._explicit_path or default_db_path()
                    self._path = chosen.resolve()
        return self._path

    def destroy(self) -> int:
        """Drop every table this store made in its file, in one transaction: the
        facts, windows, items and vector tables of every size, and their
        schema-version rows (see :mod:`fastaiagent.facts.sqlite.teardown`); the
        file stays, and so do tables of anything else in it (traces).
        Returns how many tables there were (0, and no file made, when the file
        does not exist).

        For tearing down a tenant: stop the processes using the file first. This
        store's connections are closed (those of its other threads too) and it
        can be used again afterwards, starting empty; window, item and vector
        stores taken from it before must be taken again."""
        from fastaiagent.facts.sqlite.teardown import drop_components

        if not self.path.exists():
            return 0
        self._db.close()
        # A connection of its own: the store's first would set the fact table up.
        conn = sqlite3.connect(str(self.path), timeout=self._timeout, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            dropped = drop_components(conn)
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._failure(exc) from exc
        finally:
            conn.close()  # a transaction left open is rolled back
        self._db = self._connections()
        self._forget_vector_indexes()
        return dropped

    # -- writes ------------------------------------------------------------

    def _add(self, conn: sqlite3.Connection, fact: Fact, noted: list[Change] | None = None) -> int:
        """Insert ``fact`` (or find its active text); ``noted`` takes the rows it
        added and superseded, for this thread's kept reads."""
        key = normalize_text(fact.fact)
        metadata = self._metadata_text(fact.metadata)
        values = fact_values(fact, key, metadata)
        # A new text (the usual case) is one statement: the insert yields to an
        # active row of the same text (idx_learned_memory_active_key).
        cursor = conn.execute(_INSERT_NEW, values)
        if cursor.rowcount:
            new_id = int(cursor.lastrowid or 0)
            if noted is not None:
                noted.append((values, new_id))
            return new_id
        row = conn.execute(
            "SELECT id, valid_to FROM learned_memory WHERE scope = ? AND scope_id = ? "
            "AND project_id = ? AND fact_key = ? AND superseded_by IS NULL",
            (fact.scope, fact.scope_id, fact.project_id, key),
        ).fetchone()
        if row[1] is None or row[1] > fact.created_at:
            return int(row[0])
        # Its text again after it expired: a new version replaces the expired row,
        # which leaves the unique active key first (0 marks "replacing").
        expired = int(row[0])
        conn.execute("UPDATE learned_memory SET superseded_by = 0 WHERE id = ?", (expired,))
        new_id = int(conn.execute(_INSERT, values).lastrowid or 0)
        conn.execute(
            "UPDATE learned_memory SET superseded_by = ?, superseded_at = ? WHERE id = ?",
            (new_id, fact.created_at, expired),
        )
        if noted is not None:
            noted += ((None, expired), (values, new_id))
        return new_id

    def _metadata_text(self, metadata: dict[str, Any]) -> str:
        """``metadata`` as stored: the writing agent's usual stamp reuses its text.
        Only for text values, where equal dicts are equal JSON (1 == 1.0 == True
        would store another type)."""
        current = self._usual.current
        if current is self._usual_text_only:  # checked before: only text values
            if metadata == current[1]:
                return current[0]
        elif current[1] and metadata == current[1] and all(type(v) is str for v in current[1].values()):
            self._usual_text_only = current
            return current[0]
        text = json.dumps(metadata)
        self._usual.learn(text)
        return text

    def _table_write(self) -> WriteTransaction:
        """A write transaction on another table of this file (no facts change)."""
        return self._write(self._wrote)

    def add(self, fact: Fact) -> int:
        fact = validate_for_write(fact)
        subject = (fact.scope_id, fact.scope, fact.project_id)
        with self._write(self._wrote) as conn:  # only this subject's kept reads change
            kept = self._reads.writing(conn, subject)
            if kept is not None:
                return self._add(conn, fact, None if kept is UNKEPT else kept.pending)
            noted: list[Change] = []
            new_id = self._add(conn, fact, noted)
            # A new subject (its one active fact is this one) is kept whole from here.
            fresh = len(noted) == 1 and conn.execute(_SUBJECT_PROBE, subject).fetchone()[0] == 1
            self._reads.first_write(subject, self._usual.current[0], noted[0] if fresh else None)
            return new_id

    def _supersede(self, conn: sqlite3.Connection, old_id: int, new_id: int, at: float) -> None:
        old, new = self._get(conn, old_id), self._get(conn, new_id)
        check_supersede(old, new, old_id, new_id)
        if old is not None and old.superseded_by == new_id:
            return  # already so: keep the first supersession time
        conn.execute(
            "UPDATE learned_memory SET superseded_by = ?, superseded_at = ? WHERE id = ?",
            (new_id, at, old_id),
        )

    def supersede(self, old_id: int, new_id: int, *, at: float | None = None) -> None:
        old_id, new_id = check_fact_id(old_id), check_fact_id(new_id)
        when = moment_or_now(at)
        with self._write() as conn:
            self._supersede(conn, old_id, new_id, when)

    def update(self, new: Fact, old_id: int) -> int:
        new = validate_for_write(new)
        old_id = check_fact_id(old_id)
        subject = (new.scope_id, new.scope, new.project_id)
        with self._write(self._wrote) as conn:  # a fact supersedes only its own subject's
            kept = self._reads.writing(conn, subject)
            noted = None if kept is None or kept is UNKEPT else kept.pending
            new_id = self._add(conn, new, noted)
            if new_id != old_id:
                self._supersede(conn, old_id, new_id, new.created_at)
                if noted is not None:
                    noted.append((None, old_id))
            return new_id

    def expire(self, scope: str, scope_id: str, project_id: str, fact_id: int, at: float) -> bool:
        """Set an active fact's ``valid_to`` to ``at``; False when it is not there."""
        where, params = _where(delete_selector(scope, scope_id, project_id), active_only=True)
        params += [check_fact_id(fact_id)]
        when = moment_or_now(at)
        with self._write() as conn:
            return bool(
                conn.execute(
                    f"UPDATE learned_memory SET valid_to = ? WHERE {where} AND id = ?",
                    [when, *params],
                ).rowcount
            )

    def prune_history(
        self, before: float, *, project_id: str | None = None, limit: int = DELETE_BATCH
    ) -> int:
        """Delete up to ``limit`` facts expired or superseded before ``before``."""
        cutoff, project, limit = history_cutoff(before, project_id, limit)
        tenant = "" if project is None else " AND project_id = ?"
        extra = [] if project is None else [project]
        with self._write() as conn:
            total = 0
            for where in (
                "superseded_by IS NULL AND valid_to IS NOT NULL AND valid_to <= ?",
                "superseded_by IS NOT NULL AND superseded_at <= ?",
            ):
                total += conn.execute(
                    f"DELETE FROM learned_memory WHERE id IN (SELECT id FROM learned_memory "
                    f"WHERE {where}{tenant} LIMIT ?)",
                    [cutoff, *extra, limit - total],
                ).rowcount
                if total >= limit:
                    break
            return total

    def delete_rows(self, selector: Selector, key: str | None, fact_id: int | None) -> int:
        """Hard-delete in write transactions of at most :attr:`delete_batch` rows each,
        so other writers get the database lock between steps; returns how many went.
        ``key`` removes every row with that normalised text, active or superseded."""
        where, params = _where(selector, active_only=False)
        if key is not None:  # every row of this text, history too: idx_learned_memory_subject_texts
            where += " AND fact_key = ?"
            params.append(key)
        if fact_id is not None:
            where += " AND id = ?"
            params.append(fact_id)
        step = (
            f"DELETE FROM learned_memory WHERE id IN "
            f"(SELECT id FROM learned_memory WHERE {where} LIMIT ?)"
        )
        batch, total, pause = self.delete_batch, 0, WriteSteps()
        while True:
            pause()
            with self._write() as conn:
                deleted = conn.execute(step, [*params, batch]).rowcount
            total += deleted
            if deleted < batch:
                return total

    def prune_learned(self, scope: str, scope_id: str, project_id: str = "", *, keep: int) -> int:
        integer("keep", keep, minimum=0)
        where, params = _where(delete_selector(scope, scope_id, project_id), active_only=True)
        with self._write() as conn:
            return conn.execute(
                f"DELETE FROM learned_memory WHERE id IN (SELECT id FROM learned_memory WHERE "
                f"{where} AND source = ? ORDER BY created_at DESC, id DESC LIMIT -1 OFFSET ?)",
                [*params, SOURCE_CONVERSATION, keep],
            ).rowcount

    # -- reads -------------------------------------------------------------

    def _get(self, conn: sqlite3.Connection, fact_id: int) -> Fact | None:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM learned_memory WHERE id = ?", (int(fact_id),)
        ).fetchone()
        return _row_to_fact(row) if row else None

    def get(self, fact_id: int) -> Fact | None:
        rows = self._fetch(
            f"SELECT {_COLUMNS} FROM learned_memory WHERE id = ?", (check_fact_id(fact_id),)
        )
        return _row_to_fact(rows[0]) if rows else None

    def get_many(self, fact_ids: Sequence[int]) -> dict[int, Fact]:
        """The facts of these ids that exist (active or superseded), by id, in one read
        per 500 ids (a search reads back its best hits at once)."""
        ids = list(dict.fromkeys(check_fact_id(i) for i in fact_ids))
        found: dict[int, Fact] = {}
        for start in range(0, len(ids), 500):
            batch = ids[start : start + 500]
            marks = ", ".join("?" * len(batch))
            for row in self._fetch(f"SELECT {_COLUMNS} FROM learned_memory WHERE id IN ({marks})", batch):
                fact = _row_to_fact(row)
                found[int(fact.id)] = fact  # type: ignore[arg-type]
        return found

    def read_active(
        self,
        selector: Selector,
        limit: int | None,
        offset: int,
        now: float | None,
        include_expired: bool,
    ) -> list[Fact]:
        scope, scope_id, project_id = selector.scope, selector.scope_id or "", selector.project_id
        when = time.time() if now is None else moment_or_now(now)
        count = -1 if limit is None else limit
        if selector.scope_id is not None:  # one subject: the per-turn read
            usual_text, usual = self._usual.current
            try:  # inline, not _fetch: this read runs every turn
                rows = self._subject_rows(
                    (scope_id, scope, project_id), usual_text, count, offset, when, include_expired
                )
            except sqlite3.Error as exc:
                raise self._failure(exc) from exc
            if rows and isinstance(rows[0][4], str):  # not the usual one: maybe the new usual
                self._usual.learn(rows[0][4])
            return _subject_facts(rows, scope, scope_id, project_id, usual)
        where, params = _where(selector, active_only=True)
        if not include_expired:
            where += " AND " + valid_clause("?")
            params += [when, when]
        params += [count, offset]
        rows = self._fetch(
            f"SELECT {_COLUMNS} FROM learned_memory WHERE {where} "
            "ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
            params,
        )
        return [_row_to_fact(row) for row in rows]

    def _subject_rows(
        self,
        subject: tuple[str, str, str],
        usual_text: str,
        count: int,
        offset: int,
        when: float,
        include_expired: bool,
    ) -> list[tuple[Any, ...]]:
        """The rows of a subject's newest facts: a first page is kept per thread while
        the file is unchanged (:mod:`.subject_reads`). What is kept is the page
        regardless of validity; when a row of it has bounds, the page valid at
        ``when`` is read from the file (validity moves with the clock)."""
        conn = self._connection()
        if offset == 0:
            held = self._reads.page(conn, subject, usual_text, count)
            if held is None:
                rows = conn.execute(_SUBJECT_ALL, (*subject, usual_text, count, 0)).fetchall()
                kept = kept_rows(usual_text, rows, count)
                self._reads.keep(conn, subject, kept)
                held = rows, kept.unbounded
            rows, unbounded = held
            if unbounded or include_expired:
                return rows  # not edited by the caller: shared safely
            return conn.execute(_SUBJECT_READ, (*subject, usual_text, when, count, 0)).fetchall()
        if include_expired:
            return conn.execute(_SUBJECT_ALL, (*subject, usual_text, count, offset)).fetchall()
        return conn.execute(_SUBJECT_READ, (*subject, usual_text, when, count, offset)).fetchall()

    def read_as_of(
        self, selector: Selector, when: float, limit: int | None, offset: int
    ) -> list[Fact]:
        """What the store held for the subject at ``when``: recorded, not yet
        superseded and valid then (reads the subject's rows: an audit read)."""
        where, params = _where(selector, active_only=False)
        params += [when] * 4 + [-1 if limit is None else limit, offset]
        rows = self._fetch(
            f"SELECT {_COLUMNS} FROM learned_memory WHERE {where} AND {as_of_clause('?')} "
            "ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
            params,
        )
        return [_row_to_fact(row) for row in rows]

    def replaced(self, fact_id: int) -> list[Fact]:
        """The facts ``fact_id`` superseded directly (idx_learned_memory_replaced)."""
        rows = self._fetch(
            f"SELECT {_COLUMNS} FROM learned_memory WHERE superseded_by = ? "
            "ORDER BY created_at DESC, id DESC",
            (check_fact_id(fact_id),),
        )
        return [_row_to_fact(row) for row in rows]

    def find_active(self, scope: str, scope_id: str, project_id: str, text: str) -> Fact | None:
        """The subject's active fact with this normalised text (the unique active-key index)."""
        read_selector(scope, scope_id, project_id)  # checks the scope and the id types
        rows = self._fetch(
            f"SELECT {_COLUMNS} FROM learned_memory WHERE scope = ? AND scope_id = ? "
            "AND project_id = ? AND fact_key = ? AND superseded_by IS NULL",
            (scope, scope_id, project_id, check_fact_text(text)),
        )
        return _row_to_fact(rows[0]) if rows else None

    def browse_facts(self, wanted: BrowseFilter) -> list[Fact]:
        clauses, params = browse_where(wanted, mark="?")
        where = " AND ".join(clauses) or "1"
        rows = self._fetch(
            f"SELECT {_COLUMNS} FROM learned_memory WHERE {where} "
            "ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
            [*params, wanted.limit, wanted.offset],
        )
        return [_row_to_fact(row) for row in rows]

    def subjects(self, *, include_superseded: bool = False) -> list[SubjectCount]:
        where = "" if include_superseded else "WHERE superseded_by IS NULL"
        rows = self._fetch(
            f"SELECT scope, scope_id, project_id, COUNT(*) FROM learned_memory {where} "
            "GROUP BY scope, scope_id, project_id ORDER BY scope, scope_id, project_id"
        )
        return [SubjectCount(*row) for row in rows]


MemoryStore = SQLiteFactStore
"""The spec's name for the SQLite fact store (an alias of :class:`SQLiteFactStore`)."""


def _translated(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` of a :class:`SQLiteTable`, its ``sqlite3`` errors raised as the
    library's (:func:`~fastaiagent.trace.store.sqlite_failure`)."""

    @functools.wraps(method)
    def call(self: SQLiteTable, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise sqlite_failure(exc, self.store.path) from exc

    return call


class SQLiteTable:
    """A table of its own in a :class:`SQLiteFactStore`'s file, on the store's
    connections (the item, window and vector stores); ``schema`` (its migrations)
    is brought to its version on first use.

    No ``sqlite3`` error leaves a subclass: its public methods and properties
    are wrapped when the class is defined, so a read on a damaged page is a
    :class:`~fastaiagent.errors.StoreCorruptError` naming the file as the
    store's own reads are (writes and connections are translated by the store,
    see :class:`~fastaiagent.trace.store.SQLiteFile`)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in list(vars(cls).items()):
            if name.startswith("_"):
                continue
            if inspect.isfunction(value) and not inspect.isgeneratorfunction(value):
                setattr(cls, name, _translated(value))
            elif isinstance(value, property) and value.fget is not None:
                getter = _translated(value.fget)
                setattr(cls, name, property(getter, value.fset, value.fdel, value.__doc__))

    def __init__(self, store: SQLiteFactStore, table: str, schema: Schema) -> None:
        if not isinstance(store, SQLiteFactStore):
            raise InvalidTypeError(
                f"{type(self).__name__} needs a SQLiteFactStore, got {type(store).__name__}"
            )
        if not table.replace("_", "").isalnum() or not table[0].isalpha():
            raise InvalidValueError(f"table {table!r} must be a plain identifier")
        self.store = store
        self.table = table
        self._schema = schema
        self._ready = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={str(self.store.path)!r}, table={self.table!r})"

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection, the table migrated on first use."""
        conn = self.store._connection()
        if not self._ready:
            with self._lock:
                if not self._ready:
                    try:
                        migrate(conn, self._schema, str(self.store.path))
                    except sqlite3.Error as exc:
                        raise sqlite_failure(exc, self.store.path) from exc
                    self._ready = True
        return conn

    def _execute_write(self, query: str, params: Any) -> int:
        """One write under BEGIN IMMEDIATE: in WAL mode a plain autocommit write can
        fail at once with SQLITE_BUSY when another process committed meanwhile,
        while an immediate transaction waits for the lock (busy_timeout)."""
        self._conn()
        with self.store._table_write() as conn:
            return int(conn.execute(query, params).rowcount)
