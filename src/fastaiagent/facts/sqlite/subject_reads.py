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

This connection's own writes to a kept subject only note what they added and
removed (:attr:`Kept.pending`, one append: a write costs no row building), and
the subject's next read puts them into its rows in order. A write to a subject
not kept keeps it whole from that write when the write's own transaction saw no
other active fact of it (else it is marked as not kept, so later writes do not
ask again); a write to another table of the file (windows, recalled messages)
drops none. A write that reports nothing, or anything another connection
commits, drops every kept read, pending changes with it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Hashable
from typing import Any

HELD = 256
"""Subjects whose rows a thread keeps; the longest kept goes first when full."""
HELD_ROWS = 200
"""Rows of one subject a thread keeps at most (its newest); also the changes a
subject's rows take pending before they are put in without waiting for a read."""

# The row layout of the per-turn read (SQLiteFactStore's _SUBJECT_FIELDS): the
# positions of the order (created_at DESC, id DESC) and of the validity bounds.
ROW_ID, ROW_CREATED, ROW_VALID_FROM, ROW_VALID_TO = 5, 6, 7, 8

Row = tuple[Any, ...]
Change = tuple[Any, int]
"""A pending change: ``(what the store's encoder makes a row of, its id)`` for a
fact added, ``(None, id)`` for one that left the active rows."""
Encode = Callable[[Any, int, str], Row]
"""The store's encoder: a change's record, its id and the usual metadata text -> a row."""


class Kept:
    """What a thread keeps of a subject: the usual metadata text its rows are
    encoded with (None: a subject known to have rows that are not kept), its newest
    active rows (newest first), whether they are all of them, whether none has
    validity bounds, and this connection's changes not yet put in (``pending``)."""

    __slots__ = ("complete", "pending", "rows", "unbounded", "usual")

    def __init__(self, usual: str | None, rows: list[Row], complete: bool, unbounded: bool) -> None:
        self.usual = usual
        self.rows = rows
        self.complete = complete
        self.unbounded = unbounded
        self.pending: list[Change] = []


UNKEPT = Kept(None, [], False, False)
"""The mark of a subject with rows not kept: a write to it asks nothing and notes
nothing, a read reads the file (no usual text matches None) and keeps."""


def kept_rows(usual: str, rows: list[Row], count: int) -> Kept:
    """What to keep of ``rows``, read with ``LIMIT count`` (-1: all) from offset 0."""
    complete, unbounded = count < 0 or len(rows) < count, _unbounded(rows)  # of every row read
    if len(rows) > HELD_ROWS:
        rows, complete = rows[:HELD_ROWS], False
    return Kept(usual, rows, complete, unbounded)


def _unbounded(rows: list[Row]) -> bool:
    for row in rows:  # a loop, not all(): half the cost on a miss
        if row[ROW_VALID_FROM] is not None or row[ROW_VALID_TO] is not None:
            return False
    return True


def settle(kept: Kept, encode: Encode) -> None:
    """Put ``kept``'s pending changes into its rows, in the order they were made.
    The rows are revised in place: no read holds them between a read and a write
    of the thread."""
    rows, complete, unbounded, usual = kept.rows, kept.complete, kept.unbounded, kept.usual
    assert usual is not None
    for record, fact_id in kept.pending:
        if record is None:  # one fewer row is still a prefix (unbounded kept as it was)
            rows[:] = [row for row in rows if row[ROW_ID] != fact_id]
            continue
        row = encode(record, fact_id, usual)
        created, first = row[ROW_CREATED], rows[0] if rows else None
        if first is not None and (
            created < first[ROW_CREATED] or (created == first[ROW_CREATED] and fact_id < first[ROW_ID])
        ):  # not the newest (inline: this runs per row)
            at = _place(rows, row)
            if at == len(rows) and not complete:
                continue  # it falls past the kept prefix
            rows.insert(at, row)
        else:  # the usual case: a new fact is the newest
            rows.insert(0, row)
        if unbounded and (row[ROW_VALID_FROM] is not None or row[ROW_VALID_TO] is not None):
            unbounded = False
    kept.pending = []
    if len(rows) > HELD_ROWS:
        del rows[HELD_ROWS:]
        complete = False
    kept.complete, kept.unbounded = complete, unbounded


def _newer(row: Row, other: Row) -> bool:
    """Whether ``row`` comes before ``other`` (created_at DESC, id DESC)."""
    return row[ROW_CREATED] > other[ROW_CREATED] or (
        row[ROW_CREATED] == other[ROW_CREATED] and row[ROW_ID] > other[ROW_ID]
    )


def _place(rows: list[Row], row: Row) -> int:
    """Where ``row`` goes in ``rows`` (created_at DESC, id DESC)."""
    for at, other in enumerate(rows):
        if _newer(row, other):
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
    """Each thread's kept subject rows on its connection (see the module doc);
    ``encode`` makes a row of a pending change's record."""

    def __init__(self, encode: Encode) -> None:
        self._local = threading.local()
        self._encode = encode

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
        if kept is not None and kept.usual == usual:
            if kept.pending:
                settle(kept, self._encode)
            rows: list[Row] | None = kept.rows
            assert rows is not None
            if 0 <= count < len(rows):
                rows = rows[:count]
            elif not kept.complete and count != len(rows):  # a longer page than the prefix kept
                rows = None
            if rows is not None:
                version = _version(conn)
                if version == mine.version:
                    return rows, kept.unbounded
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
            _put(mine.subjects, subject, kept)

    def writing(self, conn: sqlite3.Connection, subject: Hashable) -> Kept | None:
        """Inside a write transaction, before it writes: the subject's kept rows, whose
        ``pending`` takes the changes the write makes (:data:`UNKEPT`: its rows are
        not kept, note nothing), or None: not known, see :meth:`first_write`. Stamps
        the thread's reads on its first write (the open transaction sees every
        commit made before it, and none can come until it ends)."""
        mine = self._mine(conn)
        if mine.version is None:
            mine.version = _version(conn)
        kept = mine.subjects.get(subject)
        if kept is not None and len(kept.pending) >= HELD_ROWS:  # many writes, no read: bounded
            settle(kept, self._encode)
        return kept

    def first_write(self, subject: Hashable, usual: str, added: Change | None) -> None:
        """Inside the write transaction of a subject :meth:`writing` did not know:
        ``added`` is the one fact the write added, when it is the subject's only
        active fact (the subject is kept whole from here), else None."""
        kept = UNKEPT
        if added is not None:
            kept = Kept(usual, [], True, True)
            kept.pending.append(added)
        mine: _ThreadReads = self._local.reads  # writing()'s: its counts are apart until the commit
        _put(mine.subjects, subject, kept)

    def wrote(self, conn: sqlite3.Connection, before: int) -> None:
        """This connection committed a write its kept reads took in (pending changes
        of one subject, or none: another table of the file); ``before`` is its
        ``total_changes`` before the write. A write that went unreported meanwhile
        leaves the counts apart, and the next read drops everything."""
        mine: _ThreadReads | None = getattr(self._local, "reads", None)
        if mine is not None and mine.conn is conn and mine.changes == before:
            mine.changes = conn.total_changes


def _put(subjects: dict[Hashable, Kept], subject: Hashable, kept: Kept) -> None:
    if len(subjects) >= HELD and subject not in subjects:
        del subjects[next(iter(subjects))]
    subjects[subject] = kept


__all__ = ["HELD", "HELD_ROWS", "UNKEPT", "Change", "Kept", "SubjectReads", "kept_rows", "settle"]
