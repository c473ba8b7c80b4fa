"""The local trace store: finished spans in a SQLite file, read by the UI and `learn`.

Spans arrive in batches from a background exporter thread, so the agent's
hot path never waits on this file. The default file is ``traces.db`` beside
the local fact database (``$FASTAIAGENT_TRACE_DB`` overrides it).
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from fastaiagent._paths import default_db_path
from fastaiagent._schema import Schema
from fastaiagent._sqlite import ThreadConnections
from fastaiagent.errors import (
    FastAIAgentError,
    InvalidValueError,
    StoreConfigError,
    StoreCorruptError,
    StoreUnavailableError,
)

ENV_TRACE_DB = "FASTAIAGENT_TRACE_DB"
TRACE_FILE = "traces.db"

# Spans are stored per trace and per export batch: one row holds every span
# of one trace that arrived in one batch. A turn opens ten or more spans, so
# this writes one row where a row per span would write ten. The list is one
# JSON array (UTF-8) and the row's ``format`` says which layout of it
# (SPANS_FORMAT); JSON reads the same on every Python version. Each run (a
# trace's root span) also gets a row in ``runs``, with JSON attributes.
#
# Schema version 1 is the layout written before versions were recorded, whose
# rows were ``marshal`` bytes; version 2 adds ``format`` and rewrites those
# rows as JSON, once, when such a file is first opened.
_V1 = """
CREATE TABLE IF NOT EXISTS span_batches (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    trace_id TEXT NOT NULL,
    n INTEGER NOT NULL,
    spans BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_span_batches_trace ON span_batches (trace_id);
CREATE TABLE IF NOT EXISTS runs (
    trace_id TEXT PRIMARY KEY,
    span_id TEXT NOT NULL,
    name TEXT NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    status TEXT NOT NULL,
    attributes TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_runs_start ON runs (start_ns DESC);
CREATE INDEX IF NOT EXISTS idx_runs_name ON runs (name, start_ns DESC);
CREATE TABLE IF NOT EXISTS mined_traces (
    trace_id TEXT PRIMARY KEY,
    mined_at REAL NOT NULL
);
"""
_RUN_COLUMNS = "trace_id, span_id, name, start_ns, end_ns, status, attributes"
SPANS_FORMAT = 1
"""The layout of a stored span list: 1 = a JSON array of EncodedSpan arrays."""
_MARSHAL_FORMAT = 0  # rows written before schema version 2 (converted by it)
# One encoder reused (json.dumps with options builds a new one per call); values
# JSON does not know are stored as text, as they are shown.
_to_json = json.JSONEncoder(default=str, separators=(",", ":"), check_circular=False).encode


def _marshal_rows_to_json(conn: sqlite3.Connection) -> None:
    """Schema step 2: add ``format`` and rewrite every marshal row as JSON."""
    conn.execute(
        f"ALTER TABLE span_batches ADD COLUMN format INTEGER NOT NULL DEFAULT {_MARSHAL_FORMAT}"
    )
    last = 0
    while True:  # in id order and in chunks, so a large file is never held in memory
        rows = conn.execute(
            "SELECT id, spans FROM span_batches WHERE id > ? ORDER BY id LIMIT 1000", (last,)
        ).fetchall()
        if not rows:
            return
        last = rows[-1][0]
        conn.executemany(
            "UPDATE span_batches SET spans = ?, format = ? WHERE id = ?",
            [(encode_spans(marshal.loads(blob)), SPANS_FORMAT, row_id) for row_id, blob in rows],
        )


TRACE_SCHEMA = Schema("traces", [_V1, _marshal_rows_to_json])
"""The trace store's migrations (see :mod:`fastaiagent._schema`); version 2 today."""

# A stored span: (span_id, parent_id, name, start_ns, end_ns, status, attributes, events)
# with integer ids and events None when there are none.
EncodedSpan = tuple[Any, ...]
EncodedRun = tuple[str, str, str, int, int, str, str]


def default_trace_db_path() -> Path:
    """``$FASTAIAGENT_TRACE_DB``, else ``traces.db`` beside the local fact database."""
    env = os.environ.get(ENV_TRACE_DB)
    if env:
        return Path(env).expanduser().resolve()
    return default_db_path().parent / TRACE_FILE


@dataclass
class SpanRecord:
    """One finished span as stored. Times are UNIX nanoseconds."""

    span_id: str
    trace_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    status: str = "UNSET"
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def duration_ms(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e6


@dataclass
class SpanNode:
    """A span with its children, for rendering a trace as a tree."""

    span: SpanRecord
    children: list[SpanNode] = field(default_factory=list)
    depth: int = 0


@dataclass(frozen=True)
class RunSummary:
    """One trace, summarised by its root span (a row of the Traces page)."""

    trace_id: str
    name: str
    start_ns: int
    duration_ms: float
    status: str
    span_count: int
    attributes: dict[str, Any]


def build_tree(spans: Iterable[SpanRecord]) -> list[SpanNode]:
    """Roots (spans whose parent is not in the set) with children in start order."""
    ordered = sorted(spans, key=lambda s: (s.start_ns, s.span_id))
    nodes = {s.span_id: SpanNode(s) for s in ordered}
    roots: list[SpanNode] = []
    for record in ordered:
        node = nodes[record.span_id]
        parent = nodes.get(record.parent_id) if record.parent_id else None
        (parent.children if parent is not None else roots).append(node)

    def set_depth(node: SpanNode, depth: int) -> None:
        node.depth = depth
        for child in node.children:
            set_depth(child, depth + 1)

    for root in roots:
        set_depth(root, 0)
    return roots


def flatten(nodes: Iterable[SpanNode]) -> list[SpanNode]:
    """Depth-first order of a tree, parents before children."""
    out: list[SpanNode] = []
    stack = list(reversed(list(nodes)))
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(node.children))
    return out


def _decode(trace_id: str, item: EncodedSpan) -> SpanRecord:
    span_id, parent_id, name, start_ns, end_ns, status, attributes, events = item
    return SpanRecord(
        span_id=format(span_id, "016x"),
        trace_id=trace_id,
        parent_id=format(parent_id, "016x") if parent_id is not None else None,
        name=name,
        start_ns=start_ns,
        end_ns=end_ns,
        status=status,
        attributes=attributes or {},
        events=events or [],
    )


_USER_KEYS = ("memory.user_id", "memory.scope_id")


def _mentions_user(attributes: dict[str, Any], user_id: str) -> bool:
    """True when a span's attributes name ``user_id`` as the user it served."""
    if attributes.get("memory.user_id") == user_id:
        return True
    return attributes.get("memory.scope_id") == user_id and attributes.get("memory.scope", "user") == "user"


def encode_spans(items: list[EncodedSpan]) -> bytes:
    """The stored bytes of one trace's spans (format SPANS_FORMAT: UTF-8 JSON)."""
    return _to_json(items).encode()


def encode_record(record: SpanRecord) -> EncodedSpan:
    """The stored form of a span."""
    return (
        int(record.span_id, 16),
        int(record.parent_id, 16) if record.parent_id else None,
        record.name,
        record.start_ns,
        record.end_ns,
        record.status,
        record.attributes,
        record.events or None,
    )


# How SQLite reports each kind of failure: the error name's prefix (Python 3.11+
# sets sqlite_errorname, extended codes included) or, before that, words of the message.
_SQLITE_KINDS = (
    ("corrupt", ("SQLITE_CORRUPT", "SQLITE_NOTADB"), ("malformed", "not a database", "corrupt")),
    ("full", ("SQLITE_FULL",), ("is full",)),
    ("locked", ("SQLITE_BUSY", "SQLITE_LOCKED"), ("is locked",)),
    ("access", ("SQLITE_READONLY", "SQLITE_PERM", "SQLITE_CANTOPEN", "SQLITE_AUTH"),
     ("readonly", "unable to open", "permission", "authoriz")),
    ("io", ("SQLITE_IOERR",), ("disk i/o",)),
    ("changed", (), ("no such table", "no such column", "no such index")),
)  # fmt: skip


def _sqlite_kind(exc: sqlite3.Error) -> str:
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc).lower()
    for kind, names, words in _SQLITE_KINDS:
        if name and names:
            if name.startswith(names):
                return kind
        elif any(word in text for word in words):
            return kind
    return "other"


def sqlite_failure(exc: sqlite3.Error, path: object) -> FastAIAgentError:
    """The library's error for a ``sqlite3`` error on the database at ``path``:
    :class:`~fastaiagent.errors.StoreCorruptError` for a damaged file (not a
    database, malformed pages, tables changed outside fastaiagent),
    :class:`~fastaiagent.errors.StoreConfigError` for a file this process may not
    open or write, :class:`~fastaiagent.errors.StoreUnavailableError` for the rest
    (a full disk, a lock held past the timeout, an I/O error). Each message names
    the file and the fix; raise it ``from exc``."""
    reason = " ".join(str(exc).split()) or type(exc).__name__
    where = f"the SQLite database {str(path)!r}"
    kind = _sqlite_kind(exc)
    if kind == "corrupt":
        return StoreCorruptError(
            f"{where} is damaged ({reason}): restore it from a backup, or move it aside "
            "so a new one is created (the sqlite3 shell's .recover may save its rows)"
        )
    if kind == "changed":
        return StoreCorruptError(
            f"{where} was changed outside fastaiagent ({reason}): restore it from a "
            "backup, or move it aside so a new one is created"
        )
    if kind == "access":
        return StoreConfigError(
            f"{where} cannot be opened or written by this process ({reason}): check that "
            "the file and its folder exist and are writable by this user, or choose another path"
        )
    said = {
        "full": "is full",
        "locked": "stayed locked",
        "io": "could not be read or written",
    }.get(kind, "could not complete the call")
    fix = {
        "full": "free space on its disk (or raise the file's size limit) and retry; "
        "the call wrote nothing",
        "locked": "another connection held its lock for longer than the store's timeout; "
        "retry, raise timeout=, or find the process that keeps it locked",
        "io": "check the disk and retry",
    }.get(kind, "retry, or check the file with the sqlite3 shell")
    return StoreUnavailableError(f"{where} {said} ({reason}): {fix}")


def _roll_back(conn: sqlite3.Connection) -> None:
    """End the connection's transaction, if SQLite has not ended it already (a full
    disk rolls the transaction back itself; a second ROLLBACK would then fail and
    hide the first error)."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):  # unusable: the original error says why
            conn.execute("ROLLBACK")


Committed = Callable[[sqlite3.Connection, int], None]
"""Told of a committed write: the connection and its ``total_changes`` before it."""


class WriteTransaction:
    """``with store._write() as conn``: BEGIN IMMEDIATE (the lock up front), COMMIT
    at the end, ROLLBACK on any error; a ``sqlite3`` error anywhere in it comes
    out as the library's (:func:`sqlite_failure`). ``committed``, when given, is
    called after the COMMIT with the connection and its ``total_changes`` before
    the transaction (a cache learns what its own connection changed)."""

    __slots__ = ("_before", "_committed", "_conn", "_file")

    def __init__(self, file: SQLiteFile, committed: Committed | None = None) -> None:
        self._file = file
        self._committed = committed

    def __enter__(self) -> sqlite3.Connection:
        conn = self._file._connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._file._failure(exc) from exc
        self._conn = conn
        self._before = conn.total_changes
        return conn

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        conn = self._conn
        if kind is None:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as failed:
                _roll_back(conn)
                raise self._file._failure(failed) from failed
            if self._committed is not None:
                self._committed(conn, self._before)
            return
        _roll_back(conn)
        if isinstance(exc, sqlite3.Error):
            raise self._file._failure(exc) from exc


class SQLiteFile:
    """A store on one SQLite file: the calls it makes on its per-thread
    connections (``self._db``, a :class:`~fastaiagent._sqlite.ThreadConnections`).
    The trace store and the SQLite fact store derive from it.

    No ``sqlite3`` error leaves it: opening a connection, a write transaction
    and the reads of :meth:`_fetch` / :meth:`_stream` raise the library's
    errors instead (:func:`sqlite_failure`), the driver's error as ``__cause__``."""

    _db: ThreadConnections

    def _failure(self, exc: sqlite3.Error) -> FastAIAgentError:
        """The library's error for ``exc`` on this store's file."""
        return sqlite_failure(exc, getattr(self, "path", "?"))

    def _connection(self) -> sqlite3.Connection:
        """This thread's connection (opened, and the schema checked, on first use)."""
        try:
            return self._db.get()
        except sqlite3.Error as exc:
            raise self._failure(exc) from exc

    def _write(self, committed: Committed | None = None) -> WriteTransaction:
        """A write transaction that takes the database lock up front (``committed``:
        see :class:`WriteTransaction`)."""
        return WriteTransaction(self, committed)

    def _fetch(self, query: str, params: Any = ()) -> list[Any]:
        """Every row a read returns."""
        try:
            return self._connection().execute(query, params).fetchall()
        except sqlite3.Error as exc:
            raise self._failure(exc) from exc

    def _stream(self, query: str, params: Any = ()) -> Iterator[Any]:
        """The rows a read returns, one at a time (a large read is never held whole)."""
        try:
            yield from self._connection().execute(query, params)
        except sqlite3.Error as exc:
            raise self._failure(exc) from exc

    def close(self) -> None:
        """Close every connection; the store reopens on its next use."""
        self._db.close()


class TraceStore(SQLiteFile):
    """Spans in a SQLite file (WAL mode; one connection per thread).

    Constructing it touches no file; the first write creates it. Reads of a
    file that does not exist yet return nothing.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, timeout: float = 30.0):
        self.path = Path(path).expanduser().resolve() if path else default_trace_db_path()
        self._db = ThreadConnections(lambda: self.path, [TRACE_SCHEMA], timeout=timeout)

    def __repr__(self) -> str:
        return f"TraceStore(path={str(self.path)!r})"

    # -- writes ------------------------------------------------------------

    def write(self, spans: Iterable[SpanRecord]) -> int:
        """Store spans; a span with no parent also makes its trace a listed run."""
        grouped: dict[str, list[EncodedSpan]] = {}
        runs: list[EncodedRun] = []
        count = 0
        for record in spans:
            count += 1
            grouped.setdefault(record.trace_id, []).append(encode_record(record))
            if record.parent_id is None:
                runs.append(
                    (
                        record.trace_id,
                        record.span_id,
                        record.name,
                        record.start_ns,
                        record.end_ns,
                        record.status,
                        json.dumps(record.attributes, default=str),
                    )
                )
        batches = [(trace_id, len(items), encode_spans(items)) for trace_id, items in grouped.items()]
        self.write_batches(batches, runs)
        return count

    def write_batches(self, batches: list[tuple[str, int, bytes]], runs: list[EncodedRun]) -> None:
        """Store pre-encoded batches ``(trace_id, n, encode_spans(...))`` and run rows."""
        if not batches and not runs:
            return
        with self._write() as conn:
            if batches:
                conn.executemany(
                    "INSERT INTO span_batches (trace_id, n, spans, format) "
                    f"VALUES (?, ?, ?, {SPANS_FORMAT})",
                    batches,
                )
            if runs:
                conn.executemany(
                    f"INSERT OR REPLACE INTO runs ({_RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    runs,
                )

    def mark_mined(self, trace_ids: Iterable[str], when: float) -> None:
        """Remember that ``fastaiagent learn`` has mined these traces."""
        with self._write() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO mined_traces (trace_id, mined_at) VALUES (?, ?)",
                [(trace_id, when) for trace_id in trace_ids],
            )

    def erase_user(self, user_id: str) -> int:
        """Delete every trace that belongs to or mentions a user; returns how many.

        A trace is the user's when one of its spans carries the user's id as
        ``memory.user_id`` (runs, window loads and saves) or as the
        ``memory.scope_id`` of a user-tier verb (persist, retrieve, update).
        The whole trace goes (spans, run row, ``learn`` marks): its other spans
        hold the user's words too. Freed pages are zeroed (``secure_delete``)
        and the WAL is checkpointed, so the text does not linger in the file.
        """
        if not isinstance(user_id, str) or not user_id.strip() or user_id == "*":
            raise InvalidValueError('erase_user needs one user id (not blank, not "*")')
        if not self._exists():
            return 0
        trace_ids = sorted(self._traces_of_user(user_id))
        if not trace_ids:
            return 0
        self._fetch("PRAGMA secure_delete = ON")
        try:
            for start in range(0, len(trace_ids), 500):  # stay under SQLite's variable limit
                chunk = trace_ids[start : start + 500]
                marks = ", ".join("?" for _ in chunk)
                with self._write() as writer:
                    for table in ("span_batches", "runs", "mined_traces"):
                        writer.execute(f"DELETE FROM {table} WHERE trace_id IN ({marks})", chunk)
        finally:
            self._fetch("PRAGMA secure_delete = OFF")
        self._fetch("PRAGMA wal_checkpoint(TRUNCATE)")
        return len(trace_ids)

    def _traces_of_user(self, user_id: str) -> set[str]:
        # A substring test in SQLite picks the candidate rows without decoding
        # every stored span; decoding the candidates confirms the attribute.
        encoded = _to_json(user_id)
        needles = [f'"{key}":{encoded}'.encode() for key in _USER_KEYS]
        found: set[str] = set()
        rows = self._stream(
            "SELECT trace_id, spans FROM span_batches WHERE format = ? AND ("
            + " OR ".join("instr(spans, ?) > 0" for _ in needles)
            + ")",
            [SPANS_FORMAT, *needles],
        )
        for trace_id, payload in rows:
            if trace_id not in found and any(
                _mentions_user(item[6] or {}, user_id) for item in json.loads(payload)
            ):
                found.add(trace_id)
        return found

    # -- reads -------------------------------------------------------------

    def _exists(self) -> bool:
        return self.path.exists()

    def count_runs(self) -> int:
        """How many runs (traces with a root span) the store holds."""
        if not self._exists():
            return 0
        return int(self._fetch("SELECT COUNT(*) FROM runs")[0][0])

    def list_runs(
        self, *, limit: int = 50, offset: int = 0, name: str | None = None
    ) -> list[RunSummary]:
        """Runs newest first, summarised by their root span."""
        if not self._exists():
            return []
        where = "WHERE name = ?" if name else ""
        params: list[Any] = [name] if name else []
        rows = self._fetch(
            f"SELECT {_RUN_COLUMNS}, (SELECT COALESCE(SUM(n), 0) FROM span_batches b "
            f"WHERE b.trace_id = r.trace_id) FROM runs r {where} "
            "ORDER BY start_ns DESC LIMIT ? OFFSET ?",
            [*params, limit, max(0, offset)],
        )
        return [
            RunSummary(
                trace_id=row[0],
                name=row[2],
                start_ns=row[3],
                duration_ms=max(0, row[4] - row[3]) / 1e6,
                status=row[5],
                span_count=int(row[7]),
                attributes=json.loads(row[6]) if row[6] else {},
            )
            for row in rows
        ]

    def get_trace(self, trace_id: str) -> list[SpanRecord]:
        """Every stored span of one trace, in start order ([] if unknown)."""
        if not self._exists():
            return []
        rows = self._stream(
            "SELECT spans FROM span_batches WHERE trace_id = ? ORDER BY id", (trace_id,)
        )
        by_id: dict[str, SpanRecord] = {}
        for (payload,) in rows:
            for item in json.loads(payload):
                record = _decode(trace_id, item)
                by_id[record.span_id] = record  # a re-sent span replaces its earlier copy
        return sorted(by_id.values(), key=lambda s: (s.start_ns, s.span_id))

    def mined_trace_ids(self, trace_ids: Iterable[str]) -> set[str]:
        """The subset of ``trace_ids`` already mined by ``fastaiagent learn``."""
        ids = list(trace_ids)
        if not ids or not self._exists():
            return set()
        found: set[str] = set()
        for start in range(0, len(ids), 500):  # stay under SQLite's variable limit
            chunk = ids[start : start + 500]
            marks = ", ".join("?" for _ in chunk)
            rows = self._fetch(
                f"SELECT trace_id FROM mined_traces WHERE trace_id IN ({marks})", chunk
            )
            found.update(row[0] for row in rows)
        return found
