"""A lookup table that leaves memory as it grows.

An import keeps, for the subject it is writing, which facts the target holds
(by fingerprint) and which target id each of the file's ids became. Held in
dicts, a subject of a million facts cost ~500 MB; a :class:`SpillMap` is a
dict up to ``limit`` entries, then moves them all to a private temporary SQLite
database on disk (``sqlite3.connect("")``, deleted when closed), so an import's
memory is bounded by a page whatever one subject's size.
"""

from __future__ import annotations

import sqlite3

SPILL_AFTER = 10_000  # entries kept in memory (~2 MB a table) before the table moves to disk
WRITE_BATCH = 1000  # writes to the table on disk wait to go in one executemany


Pair = tuple[int, "int | None"]


class SpillMap:
    """``str`` keys to pairs of ints (the second may be None): a dict up to ``limit``
    entries (:data:`SPILL_AFTER` by default), then a table on disk, written
    :data:`WRITE_BATCH` entries at a time."""

    def __init__(self, limit: int | None = None) -> None:
        self._limit = SPILL_AFTER if limit is None else limit  # read now: a setting
        self._memory: dict[str, Pair] = {}  # every entry, or (on disk) the writes waiting
        self._db: sqlite3.Connection | None = None

    def get(self, key: str) -> Pair | None:
        """The pair of ``key``, or None."""
        found = self._memory.get(key)
        if found is not None or self._db is None:
            return found
        row = self._db.execute("SELECT a, b FROM m WHERE k = ?", (key,)).fetchone()
        return None if row is None else (row[0], row[1])

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def put(self, key: str, value: Pair) -> None:
        self._memory[key] = value
        if self._db is None:
            if len(self._memory) > self._limit:
                self._db = sqlite3.connect("")  # a temporary database on disk, removed on close
                self._db.execute("CREATE TABLE m (k TEXT PRIMARY KEY, a INTEGER NOT NULL, b INTEGER) WITHOUT ROWID")
                self._write()
        elif len(self._memory) >= WRITE_BATCH:
            self._write()

    def _write(self) -> None:
        assert self._db is not None
        self._db.executemany("INSERT OR REPLACE INTO m VALUES (?, ?, ?)", ((k, *v) for k, v in self._memory.items()))
        self._memory = {}

    def close(self) -> None:
        """Drop every entry (and the table on disk)."""
        if self._db is not None:
            self._db.close()
        self._db, self._memory = None, {}
