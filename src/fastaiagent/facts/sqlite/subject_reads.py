"""The per-turn read of a subject's newest facts, answered again from memory while
the database file is unchanged.

An agent reads the same few subjects every turn and they seldom change between
turns. Each thread keeps the rows of its last reads on its own connection,
stamped with two change markers SQLite keeps for free: ``total_changes`` (rows
this connection wrote) and ``PRAGMA data_version`` (moves when any other
connection, in this process or another, commits to the file). A read whose
stamp still holds costs the PRAGMA (~2 us) instead of the query and its rows
(~12 us for 20 facts); any write anywhere empties the thread's reads.

Rows are kept, not facts: each read still makes its own :class:`Fact` objects,
so a caller that edits one never changes what the next read returns. After this
connection's own writes a read is not kept (the next one is): a thread that
writes between its reads never pays the PRAGMA for nothing.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Hashable
from typing import Any

HELD = 256  # subjects' reads kept per thread; all dropped when full


class _ThreadReads:
    __slots__ = ("changes", "conn", "rows", "version")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.changes = conn.total_changes
        self.version: int | None = None  # set by the first read after a write
        self.rows: dict[Hashable, Any] = {}


class SubjectReads:
    """Each thread's recent subject reads on its connection (see the module doc)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def held(self, conn: sqlite3.Connection, key: Hashable) -> tuple[Any, int | None]:
        """``(rows kept for key or None, the file's version to keep a new read under
        or None)``: None for both right after this connection wrote."""
        mine: _ThreadReads | None = getattr(self._local, "reads", None)
        if mine is None or mine.conn is not conn or mine.changes != conn.total_changes:
            self._local.reads = _ThreadReads(conn)
            return None, None
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if version != mine.version:
            mine.version, mine.rows = version, {}
            return None, version
        return mine.rows.get(key), version

    def keep(self, conn: sqlite3.Connection, key: Hashable, rows: Any, version: int) -> None:
        """Keep ``rows``, read under ``version``, unless the connection wrote since."""
        mine: _ThreadReads | None = getattr(self._local, "reads", None)
        if mine is None or mine.conn is not conn or mine.version != version:
            return
        if mine.changes != conn.total_changes:
            return
        if len(mine.rows) >= HELD:
            mine.rows.clear()
        mine.rows[key] = rows


__all__ = ["HELD", "SubjectReads"]
