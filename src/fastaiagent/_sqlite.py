"""Per-thread SQLite connections shared by the local stores (facts, traces).

Each thread reuses one connection (sqlite3 connections are cheap to keep and
costly to open per call); a forked child opens its own; the database runs in
WAL mode so readers never wait for the writer. The schema runs once, on the
first connection.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


class ThreadConnections:
    """The connections of one database file, opened lazily at ``path()``."""

    def __init__(
        self,
        path: Callable[[], Path],
        schema: str,
        *,
        timeout: float = 30.0,
        pragmas: Sequence[str] = (),
    ) -> None:
        self._path = path
        self._schema = schema
        self._timeout = timeout
        self._pragmas = tuple(pragmas)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._schema_ready = False
        self._pid = os.getpid()

    def get(self) -> sqlite3.Connection:
        """This thread's connection, opened (and the schema applied) on first use."""
        if os.getpid() != self._pid:  # a forked child must not share the parent's handles
            self._local = threading.local()
            self._connections = []
            self._pid = os.getpid()
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        path = self._path()
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            str(path), timeout=self._timeout, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
        for pragma in self._pragmas:
            conn.execute(pragma)
        with self._lock:
            if not self._schema_ready:
                conn.executescript(self._schema)
                self._schema_ready = True
            self._connections.append(conn)
        self._local.conn = conn
        return conn

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that takes the database lock up front."""
        conn = self.get()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        """Close every connection; the next call opens new ones."""
        with self._lock:
            connections, self._connections = self._connections, []
            self._local = threading.local()
        for conn in connections:
            with contextlib.suppress(sqlite3.Error):  # already closed by its thread
                conn.close()
