"""A lookup table that leaves memory as it grows.

An import keeps, for the subject it is writing, which facts the target holds
(by fingerprint) and which target id each of the file's ids became. Held in
dicts, a subject of a million facts cost ~500 MB; a :class:`SpillMap` keeps
its first ``limit`` entries in a dict and the rest in a private temporary
SQLite database on disk (``sqlite3.connect("")``, deleted when closed), so an
import's memory is bounded by a page whatever one subject's size.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

SPILL_AFTER = 1000  # entries kept in memory before the table moves to disk


class SpillMap:
    """``str`` keys to JSON values: a dict up to ``limit`` entries, then a table on disk."""

    def __init__(self, limit: int = SPILL_AFTER) -> None:
        self._limit = limit
        self._memory: dict[str, Any] = {}
        self._db: sqlite3.Connection | None = None

    def get(self, key: str) -> Any:
        """The value of ``key``, or None."""
        if self._db is None:
            return self._memory.get(key)
        row = self._db.execute("SELECT v FROM m WHERE k = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def put(self, key: str, value: Any) -> None:
        """Set ``key`` to ``value`` (not None: None reads as absent)."""
        if self._db is None:
            self._memory[key] = value
            if len(self._memory) > self._limit:
                self._spill()
            return
        self._db.execute("INSERT OR REPLACE INTO m VALUES (?, ?)", (key, json.dumps(value)))

    def _spill(self) -> None:
        db = sqlite3.connect("")  # a temporary database on disk, removed on close
        db.execute("CREATE TABLE m (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID")
        db.executemany("INSERT INTO m VALUES (?, ?)", ((k, json.dumps(v)) for k, v in self._memory.items()))
        self._db, self._memory = db, {}

    def close(self) -> None:
        """Drop every entry (and the table on disk)."""
        if self._db is not None:
            self._db.close()
        self._db, self._memory = None, {}
