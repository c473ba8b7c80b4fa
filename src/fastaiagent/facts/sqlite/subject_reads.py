"""The per-turn read of a subject's newest facts, answered again from memory while
the subject is unchanged.

An agent reads the same few subjects every turn and they seldom change between
turns. Each thread keeps the rows of its last reads on its own connection,
stamped with two change markers SQLite keeps for free: ``total_changes`` (rows
this connection wrote) and ``PRAGMA data_version`` (moves when any other
connection, in this process or another, commits to the file). A read whose
stamp still holds costs the PRAGMA (~2 us) instead of the query and its rows
(~12 us for 20 facts).

The miss path costs what a plain read costs. The first read of a subject since
it last changed goes straight to the file, with no PRAGMA and nothing kept: a
burst of reads of many subjects after writes (an agent after ``learn`` or the
verbs wrote) pays for no cache it will not use. The second read stamps and
keeps, the third is answered from memory.

Writes this connection makes report what they changed (:meth:`SubjectReads.wrote`):
a fact added to one subject drops that subject's reads only, a write to another
table of the file (windows, recalled messages) drops none. A write that reports
nothing, or anything another connection commits, drops every kept read.

Rows are kept, not facts: each read still makes its own :class:`Fact` objects,
so a caller that edits one never changes what the next read returns.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Hashable
from typing import Any

HELD = 256  # subjects whose reads a thread keeps; all dropped when full


class _ThreadReads:
    __slots__ = ("changes", "conn", "subjects", "version")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.changes = conn.total_changes
        self.version: int | None = None  # the file's version the kept pages were read at
        # subject -> {page: rows}; an empty dict marks a subject read once, nothing kept
        self.subjects: dict[Hashable, dict[Hashable, Any]] = {}


class SubjectReads:
    """Each thread's recent subject reads on its connection (see the module doc)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _mine(self, conn: sqlite3.Connection) -> _ThreadReads | None:
        mine: _ThreadReads | None = getattr(self._local, "reads", None)
        return mine if mine is not None and mine.conn is conn else None

    def held(self, conn: sqlite3.Connection, subject: Hashable, page: Hashable) -> tuple[Any, int | None]:
        """``(rows kept for the subject's page or None, the file's version to keep a
        new read under or None)``: None for both on a subject's first read since it
        changed (read it straight, keep nothing)."""
        mine = self._mine(conn)
        if mine is None or mine.changes != conn.total_changes:  # new, or a write not reported
            mine = self._local.reads = _ThreadReads(conn)
        pages = mine.subjects.get(subject)
        if pages is None:
            if len(mine.subjects) >= HELD:
                mine.subjects.clear()
            mine.subjects[subject] = {}
            return None, None
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if version != mine.version:  # another connection committed: nothing kept holds
            mine.version, mine.subjects = version, {subject: {}}
            return None, version
        return pages.get(page), version

    def keep(self, conn: sqlite3.Connection, subject: Hashable, page: Hashable, rows: Any, version: int) -> None:
        """Keep ``rows``, read under ``version``, unless anything changed since."""
        mine = self._mine(conn)
        if mine is None or mine.version != version or mine.changes != conn.total_changes:
            return
        pages = mine.subjects.get(subject)
        if pages is not None:
            pages[page] = rows

    def wrote(self, conn: sqlite3.Connection, before: int, subject: Hashable | None) -> None:
        """This connection committed a write that changed only ``subject``'s facts
        (None: no facts at all); ``before`` is its ``total_changes`` before the write.
        Other subjects' reads stay, unless a write went unreported meanwhile."""
        mine = self._mine(conn)
        if mine is None or mine.changes != before:
            return  # the next read finds the counts apart and drops everything
        mine.changes = conn.total_changes
        if subject is not None:
            mine.subjects.pop(subject, None)

    def wrote_beside(self, conn: sqlite3.Connection, before: int) -> None:
        """This connection committed a write to another table of the file."""
        self.wrote(conn, before, None)


__all__ = ["HELD", "SubjectReads"]
