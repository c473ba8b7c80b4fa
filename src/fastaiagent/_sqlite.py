"""Per-thread SQLite connections shared by the local stores (facts, windows, traces).

Each thread reuses one connection (sqlite3 connections are cheap to keep and
costly to open per call) and a thread that has ended gives its connection
back (closed when the next one opens: a server that starts a thread per
request would otherwise keep a connection, a file handle and a page cache
per request it ever served); a forked child opens its own; the database runs in
WAL mode so readers never wait for the writer. The first connection brings
each component's tables to the version this code knows (see
:mod:`fastaiagent._schema`); a database already at that version runs no DDL.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from fastaiagent._schema import VERSION_TABLE, Schema, check_not_newer, sql_statements
from fastaiagent.errors import NotFoundError

_CREATE_VERSION_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} "
    "(component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
)


def recorded_version(conn: sqlite3.Connection, component: str) -> int:
    """The version recorded for ``component``; 0 when none is (no table, or no row)."""
    if not conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (VERSION_TABLE,)
    ).fetchone():
        return 0
    row = conn.execute(
        f"SELECT version FROM {VERSION_TABLE} WHERE component = ?", (component,)
    ).fetchone()
    return int(row[0]) if row else 0


def migrate(conn: sqlite3.Connection, schema: Schema, where: str) -> None:
    """Bring ``schema.component`` to ``schema.version``: nothing to do costs two reads
    and no DDL; otherwise the missing steps and the new version commit together in
    one ``BEGIN IMMEDIATE`` transaction, so concurrent openers (threads or
    processes) wait for the first and then find the work done."""
    found = recorded_version(conn, schema.component)
    check_not_newer(schema, found, where)
    if found == schema.version:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_CREATE_VERSION_TABLE)
        found = recorded_version(conn, schema.component)  # another opener may have finished
        check_not_newer(schema, found, where)
        for step in schema.steps[found:]:
            if isinstance(step, str):
                for statement in sql_statements(step):
                    conn.execute(statement)
            else:
                step(conn)
        conn.execute(
            f"INSERT OR REPLACE INTO {VERSION_TABLE} (component, version) VALUES (?, ?)",
            (schema.component, schema.version),
        )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _use_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch the file to WAL unless it already is (the mode is stored in the file).

    The switch needs an exclusive lock, and SQLite can report "database is locked"
    at once, without the busy handler, while another connection opens the same new
    file; so a locked switch is retried until ``timeout``.
    """
    if conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
        return
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)  # back off: the other opener holds the lock for microseconds
        delay = min(delay * 2, 0.05)


def check_folder(path: Path) -> None:
    """Raise NotFoundError naming the fix when ``path``'s folder does not exist."""
    if not path.parent.is_dir():
        raise NotFoundError(
            f"folder {str(path.parent)!r} for the SQLite database {path.name!r} does not "
            f"exist: create it first (mkdir -p {str(path.parent)!r}) or choose another path"
        )


_forks = [0]  # forks this process came through: a child must not use its parent's handles
if hasattr(os, "register_at_fork"):  # every POSIX Python; counting costs no syscall per call
    os.register_at_fork(after_in_child=lambda: _forks.__setitem__(0, _forks[0] + 1))


class ThreadConnections:
    """The connections of one database file, opened lazily at ``path()``.

    ``schemas`` are brought to their versions on the first connection.
    ``create_folder=False`` (an explicit path) raises
    :class:`~fastaiagent.errors.NotFoundError` when the file's folder is missing
    instead of creating it.
    """

    def __init__(
        self,
        path: Callable[[], Path],
        schemas: Sequence[Schema],
        *,
        timeout: float = 30.0,
        pragmas: Sequence[str] = (),
        create_folder: bool = True,
    ) -> None:
        self._path = path
        self._schemas = tuple(schemas)
        self._timeout = timeout
        self._pragmas = tuple(pragmas)
        self._create_folder = create_folder
        self._local = threading.local()
        self._lock = threading.Lock()
        # Every connection open, with the thread it belongs to (for close(), and to
        # close those of threads that have ended).
        self._connections: list[tuple[threading.Thread, sqlite3.Connection]] = []
        self._schema_ready = False
        self._forks = _forks[0]

    def get(self) -> sqlite3.Connection:
        """This thread's connection, opened (and the schemas checked) on first use."""
        if _forks[0] != self._forks:  # a forked child must not share the parent's handles
            self._local = threading.local()
            self._connections = []
            self._forks = _forks[0]
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        conn = self._open()
        with self._lock:
            if not self._schema_ready:
                try:
                    for schema in self._schemas:
                        migrate(conn, schema, str(self._path()))
                except BaseException:  # e.g. a newer version: the next call checks again
                    conn.close()
                    raise
                self._schema_ready = True
            ended = [held for thread, held in self._connections if not thread.is_alive()]
            self._connections = [pair for pair in self._connections if pair[0].is_alive()]
            self._connections.append((threading.current_thread(), conn))
        for held in ended:
            with contextlib.suppress(sqlite3.Error):
                held.close()
        self._local.conn = conn
        return conn

    def _open(self) -> sqlite3.Connection:
        path = self._path()
        if self._create_folder:
            path.parent.mkdir(parents=True, exist_ok=True)
        else:
            check_folder(path)
        conn = sqlite3.connect(
            str(path), timeout=self._timeout, isolation_level=None, check_same_thread=False
        )
        try:
            # The busy timeout first: every later statement may meet another opener's lock.
            conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
            _use_wal(conn, self._timeout)
            conn.execute("PRAGMA synchronous=NORMAL")
            for pragma in self._pragmas:
                conn.execute(pragma)
        except BaseException:
            conn.close()
            raise
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
        for _, conn in connections:
            with contextlib.suppress(sqlite3.Error):  # already closed by its thread
                conn.close()
