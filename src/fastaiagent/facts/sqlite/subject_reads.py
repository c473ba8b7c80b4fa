"""The per-turn read of a subject's newest facts, answered again from memory while
the subject is unchanged, and kept up to date by this connection's own writes.

An agent reads the same few subjects every turn and they seldom change between
turns, and when they do it is mostly the agent's own writes (``learn``, the
verbs). Each thread keeps, on its own connection, the newest rows of the
subjects it read or wrote: a newest-first prefix of the subject's active facts
(``complete`` when it is all of them), which answers any first page no longer
than it. Two change markers SQLite keeps for free guard them: ``total_changes``
(rows this connection wrote) and ``PRAGMA data_version`` (moves when any other
connection, in this process or another, commits to the file). A read answered
from memory costs the PRAGMA (~2 us) instead of the query and its rows (~20 us
for 20 facts).

A read from the file keeps what it read and runs no PRAGMA: the rows are stamped
with the version of the last PRAGMA, taken before them, so they are at least as
new as their stamp says and any later commit elsewhere shows as a version apart.

Writes this connection makes report what they changed (:meth:`SubjectReads.wrote`):
a fact added to a subject goes into its kept rows in order (the write's own
transaction says whether a subject not kept had no other active fact, so a new
subject is kept whole from its first write); a write to another table of the file
(windows, recalled messages) drops none. A write that reports nothing, or
anything another connection commits, drops every kept read.

Rows are kept, not facts: each read still makes its own :class:`Fact` objects,
so a caller that edits one never changes what the next read returns.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Hashable
from typing import Any

from fastaiagent.facts.fact import UsualMetadata

HELD = 256
"""Subjects whose rows a thread keeps; the longest kept goes first when full."""
HELD_ROWS = 200
"""Rows of one subject a thread keeps at most (its newest)."""

# The row layout of the per-turn read (SQLiteFactStore's _SUBJECT_FIELDS): the
# positions of the order (created_at DESC, id DESC) and of the validity bounds.
ROW_ID, ROW_CREATED, ROW_VALID_FROM, ROW_VALID_TO = 5, 6, 7, 8

Row = tuple[Any, ...]
Kept = tuple[str, list[Row], bool, bool]
"""What a thread keeps of a subject: the usual metadata text its rows are encoded
with, its newest active rows (newest first), whether they are all of them, and
whether none has validity bounds."""


def kept_rows(usual: str, rows: list[Row], count: int) -> Kept:
    """What to keep of ``rows``, read with ``LIMIT count`` (-1: all) from offset 0."""
    complete, unbounded = count < 0 or len(rows) < count, _unbounded(rows)  # of every row read
    if len(rows) > HELD_ROWS:
        rows, complete = rows[:HELD_ROWS], False
    return usual, rows, complete, unbounded


def _unbounded(rows: list[Row]) -> bool:
    for row in rows:  # a loop, not all(): half the cost on a miss
        if row[ROW_VALID_FROM] is not None or row[ROW_VALID_TO] is not None:
            return False
    return True


class SubjectChange:
    """What one write transaction did to a subject's active rows, for its kept
    rows: ``added`` (what the store's ``encode`` makes a row of, given the kept
    usual metadata text), ``removed`` ids; ``fresh`` when the transaction saw no
    active row of the subject but its own."""

    __slots__ = ("added", "encode", "fresh", "removed", "usual")

    def __init__(self, encode: Callable[[Any, str], Row], usual: UsualMetadata) -> None:
        self.encode = encode
        self.usual = usual  # the store's: a fresh subject's rows are kept with its text
        self.added: list[Any] = []
        self.removed: list[int] = []
        self.fresh = False

    def remove(self, fact_id: int) -> None:
        self.removed.append(fact_id)

    def revise(self, kept: Kept | None) -> Kept | None:
        """``kept`` after this change (None: keep nothing of the subject). Its rows
        are revised in place: no read holds them between a read and a write of
        the thread."""
        if kept is None:
            if not self.fresh:
                return None
            rows: list[Row] = []
            usual, complete, unbounded = self.usual.current[0], True, True
        else:
            usual, rows, complete, unbounded = kept
            if self.removed:  # one fewer row is still a prefix (unbounded kept as it was)
                rows[:] = [row for row in rows if row[ROW_ID] not in self.removed]
        for added in self.added:
            row = self.encode(added, usual)
            at = _place(rows, row)
            if at < len(rows) or complete:  # else it falls past the kept prefix
                rows.insert(at, row)
                unbounded = unbounded and row[ROW_VALID_FROM] is None and row[ROW_VALID_TO] is None
        if len(rows) > HELD_ROWS:
            del rows[HELD_ROWS:]
            complete = False
        return usual, rows, complete, unbounded


def _place(rows: list[Row], row: Row) -> int:
    """Where ``row`` goes in ``rows`` (created_at DESC, id DESC); a new fact is
    usually the newest."""
    created, fact_id = row[ROW_CREATED], row[ROW_ID]
    for at, other in enumerate(rows):
        if created > other[ROW_CREATED] or (created == other[ROW_CREATED] and fact_id > other[ROW_ID]):
            return at
    return len(rows)


class _ThreadReads:
    __slots__ = ("changes", "conn", "subjects", "version")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.changes = conn.total_changes
        # PRAGMA data_version when last asked: every kept row is at least that new
        self.version: int | None = None
        self.subjects: dict[Hashable, Kept] = {}


def _version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


class SubjectReads:
    """Each thread's kept subject rows on its connection (see the module doc)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _mine(self, conn: sqlite3.Connection) -> _ThreadReads:
        mine: _ThreadReads | None = getattr(self._local, "reads", None)
        if mine is None or mine.conn is not conn:
            mine = self._local.reads = _ThreadReads(conn)
        elif mine.changes != conn.total_changes:  # a write not reported: nothing kept holds
            mine.subjects.clear()
            mine.changes = conn.total_changes
        return mine

    def page(self, conn: sqlite3.Connection, subject: Hashable, usual: str, count: int) -> tuple[list[Row], bool] | None:
        """``(rows, none bounded)`` of the subject's first page of ``count`` rows (-1:
        all) encoded with ``usual``, or None: read it from the file, then :meth:`keep`."""
        mine = self._mine(conn)
        kept = mine.subjects.get(subject)
        if kept is not None and kept[0] == usual:
            rows: list[Row] | None = kept[1]
            assert rows is not None
            if 0 <= count < len(rows):
                rows = rows[:count]
            elif not kept[2] and count != len(rows):  # a longer page than the prefix kept
                rows = None
            if rows is not None:
                version = _version(conn)
                if version == mine.version:
                    return rows, kept[3]
                mine.version = version  # another connection committed: nothing kept holds
                mine.subjects.clear()
                return None
        if mine.version is None:
            mine.version = _version(conn)  # taken before the read it will stamp
        return None

    def keep(self, conn: sqlite3.Connection, subject: Hashable, kept: Kept) -> None:
        """Keep rows just read from the file, after :meth:`page` said to read them."""
        mine = self._mine(conn)
        if mine.version is not None:
            self._put(mine, subject, kept)

    @staticmethod
    def _put(mine: _ThreadReads, subject: Hashable, kept: Kept) -> None:
        subjects = mine.subjects
        if len(subjects) >= HELD and subject not in subjects:
            del subjects[next(iter(subjects))]
        subjects[subject] = kept

    def writing(self, conn: sqlite3.Connection, subject: Hashable) -> bool:
        """Inside a write transaction, before it writes: whether the subject's rows
        are kept (else its :class:`SubjectChange` may say it is ``fresh``). Stamps
        the thread's reads on its first write (the open transaction sees every
        commit made before it, and none can come until it ends)."""
        mine = self._mine(conn)
        if mine.version is None:
            mine.version = _version(conn)
        return subject in mine.subjects

    def wrote(
        self, conn: sqlite3.Connection, before: int, subject: Hashable | None, change: SubjectChange | None = None
    ) -> None:
        """This connection committed a write that changed only ``subject``'s facts
        (None: no facts at all), as ``change`` says (None: drop the subject's rows);
        ``before`` is its ``total_changes`` before the write. Other subjects' rows
        stay, unless a write went unreported meanwhile."""
        mine: _ThreadReads | None = getattr(self._local, "reads", None)
        if mine is None or mine.conn is not conn or mine.changes != before:
            return  # the next read finds the counts apart and drops everything
        mine.changes = conn.total_changes
        if subject is None:
            return
        kept = None if change is None else change.revise(mine.subjects.get(subject))
        if kept is None:
            mine.subjects.pop(subject, None)
        else:
            self._put(mine, subject, kept)

    def wrote_beside(self, conn: sqlite3.Connection, before: int) -> None:
        """This connection committed a write to another table of the file."""
        self.wrote(conn, before, None)


__all__ = ["HELD", "HELD_ROWS", "Kept", "SubjectChange", "SubjectReads", "kept_rows"]
