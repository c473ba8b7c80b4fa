"""Schema versions of the SQLite files: facts, windows and traces.

A database written before versions were recorded (the layout of commit
ab594ca, written here with that code's exact DDL) opens with every row kept
and its version recorded; a second open runs no DDL; a version newer than this
code raises SchemaVersionError; several processes opening an old file at
once migrate it once.
"""

from __future__ import annotations

import marshal
import multiprocessing
import sqlite3
import threading
from pathlib import Path

import pytest

from fastaiagent._schema import VERSION_TABLE
from fastaiagent._sqlite import ThreadConnections
from fastaiagent.errors import SchemaVersionError
from fastaiagent.facts.sqlite.store import FACTS_SCHEMA, SQLiteFactStore
from fastaiagent.facts.sqlite.windows import SQLiteWindowStore, windows_schema
from fastaiagent.facts.windows import WindowKey
from fastaiagent.learn import Fact
from fastaiagent.trace.store import TRACE_SCHEMA, SpanRecord, TraceStore

# -- the layouts written before versions existed (ab594ca), verbatim -------------------

OLD_FACTS_DDL = """
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

OLD_WINDOWS_DDL = """
CREATE TABLE IF NOT EXISTS conversation_windows (
    agent_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    version TEXT NOT NULL,
    state TEXT NOT NULL,
    updated_at REAL NOT NULL,
    expires_at REAL,
    PRIMARY KEY (agent_id, project_id, user_id)
);
CREATE INDEX IF NOT EXISTS idx_conversation_windows_expires ON conversation_windows (expires_at) WHERE expires_at IS NOT NULL;
"""

OLD_TRACE_DDL = """
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

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"


def _old_database(path: Path, ddl: str) -> sqlite3.Connection:
    """A file as the old code left it: WAL, its DDL, no version recorded."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(ddl)
    return conn


def _write_old_facts(path: Path) -> None:
    conn = _old_database(path, OLD_FACTS_DDL)
    rows = [
        ("Likes tea", "likes tea", "user", "u1", "", 0.9, "manual", None, 1000.0, None, "{}"),
        ("Prefers email", "prefers email", "user", "u1", "p", 1.0, "conversation", "t1", 1001.0,
         None, '{"k": 1}'),
        ("Old fact", "old fact", "user", "u2", "", 1.0, "manual", None, 1002.0, None, "{}"),
        ("New fact", "new fact", "user", "u2", "", 1.0, "manual", None, 1003.0, None, "{}"),
    ]
    conn.executemany(
        "INSERT INTO learned_memory (fact, fact_key, scope, scope_id, project_id, confidence, "
        "source, source_trace_id, created_at, superseded_by, metadata) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    conn.execute("UPDATE learned_memory SET superseded_by = 4 WHERE id = 3")
    conn.close()


def _old_marshal_spans() -> list[tuple[object, ...]]:
    """Spans in the old stored form: integer ids, events None when empty."""
    root, child = 0x1111111111111111, 0x2222222222222222
    return [
        (root, None, "agent.run", 100, 900, "OK", {"agent.input": "hello", "n": 3}, None),
        (child, root, "memory.read", 200, 300, "UNSET", {"memory.blocks": ["a", "b"]},
         [{"name": "hit", "time_ns": 250, "attributes": {"k": 1.5}}]),
    ]


def _write_old_traces(path: Path) -> None:
    conn = _old_database(path, OLD_TRACE_DDL)
    spans = _old_marshal_spans()
    conn.execute(
        "INSERT INTO span_batches (trace_id, n, spans) VALUES (?, ?, ?)",
        (TRACE_ID, len(spans), marshal.dumps(spans)),
    )
    conn.execute(
        "INSERT INTO runs (trace_id, span_id, name, start_ns, end_ns, status, attributes) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (TRACE_ID, "1111111111111111", "agent.run", 100, 900, "OK", '{"agent.input": "hello"}'),
    )
    conn.execute("INSERT INTO mined_traces (trace_id, mined_at) VALUES (?, 5.0)", (TRACE_ID,))
    conn.close()


def _versions(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute(f"SELECT component, version FROM {VERSION_TABLE}").fetchall())
    finally:
        conn.close()


def _set_version(path: Path, component: str, version: int) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"UPDATE {VERSION_TABLE} SET version = ? WHERE component = ?", (version, component))
    conn.close()


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every SQL statement the stores' connections run (sqlite3's trace callback)."""
    seen: list[str] = []
    real_connect = sqlite3.connect

    def connect(*args, **kwargs):  # type: ignore[no-untyped-def]
        conn = real_connect(*args, **kwargs)
        conn.set_trace_callback(seen.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    return seen


def _ddl(statements: list[str]) -> list[str]:
    words = ("CREATE", "DROP", "ALTER", "INSERT OR REPLACE INTO FASTAIAGENT_SCHEMA", "BEGIN")
    return [s for s in statements if s.lstrip().upper().startswith(words)]


# -- facts -----------------------------------------------------------------------------


def test_an_old_fact_file_keeps_every_row_and_records_its_version(tmp_path: Path) -> None:
    path = tmp_path / "local.db"
    _write_old_facts(path)
    store = SQLiteFactStore(path)
    assert [f.fact for f in store.list_active("user", "u1")] == ["Likes tea"]
    assert [f.fact for f in store.list_active("user", "u1", "p")] == ["Prefers email"]
    assert store.list_active("user", "u1", "p")[0].metadata == {"k": 1}
    assert [f.fact for f in store.list_active("user", "u2")] == ["New fact"]
    assert store.get(3).superseded_by == 4  # type: ignore[union-attr]
    assert len(store.browse(include_superseded=True)) == 4
    assert store.add(Fact("LIKES  tea", scope="user", scope_id="u1")) == 1  # same active key
    assert _versions(path) == {FACTS_SCHEMA.component: FACTS_SCHEMA.version}
    store.close()


def test_a_second_open_runs_no_ddl(tmp_path: Path, statements: list[str]) -> None:
    path = tmp_path / "local.db"
    first = SQLiteFactStore(path)
    first.add(Fact("x", scope="user", scope_id="u"))
    first.close()
    assert _ddl(statements)  # the first open created the layout
    statements.clear()
    second = SQLiteFactStore(path)
    assert [f.fact for f in second.list_active("user", "u")] == ["x"]
    assert statements  # the callback saw the open and the read
    assert _ddl(statements) == []
    second.close()


def test_a_newer_fact_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "local.db"
    SQLiteFactStore(path).add(Fact("x", scope="user", scope_id="u"))
    _set_version(path, FACTS_SCHEMA.component, FACTS_SCHEMA.version + 1)
    store = SQLiteFactStore(path)
    with pytest.raises(SchemaVersionError, match=r"newer fastaiagent.*pip install -U fastaiagent"):
        store.list_active("user", "u")
    newer = FACTS_SCHEMA.version + 1
    with pytest.raises(RuntimeError, match=f"facts:learned_memory' at schema version {newer}"):
        store.get(1)
    store.close()


def test_a_version_1_fact_file_gets_the_text_index_and_forgets_history(tmp_path: Path) -> None:
    """Version 2 indexes every row by text, so delete(fact=) also removes superseded rows."""
    path = tmp_path / "local.db"
    _write_old_facts(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"CREATE TABLE {VERSION_TABLE} (component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
    conn.execute(f"INSERT INTO {VERSION_TABLE} VALUES (?, 1)", (FACTS_SCHEMA.component,))
    conn.close()
    store = SQLiteFactStore(path)
    assert store.add(Fact("Old FACT", scope="user", scope_id="u2")) == 5  # active again
    assert _versions(path) == {FACTS_SCHEMA.component: FACTS_SCHEMA.version}
    indexes = sqlite3.connect(path).execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'learned_memory'"
    )
    assert "idx_learned_memory_subject_texts" in {row[0] for row in indexes}
    assert store.delete("user", "u2", fact="old fact") == 2  # #3 (superseded) and #5
    assert store.get(3) is None and store.get(5) is None
    assert [f.fact for f in store.list_active("user", "u2")] == ["New fact"]
    store.close()


# -- windows ---------------------------------------------------------------------------


def test_an_old_windows_table_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "local.db"
    _write_old_facts(path)
    conn = _old_database(path, OLD_WINDOWS_DDL)
    conn.execute(
        "INSERT INTO conversation_windows VALUES ('agent', '', 'u1', 'v1', '[\"hi\"]', 1.0, NULL)"
    )
    conn.close()
    windows = SQLiteWindowStore(SQLiteFactStore(path))
    key = WindowKey("agent", "", "u1")
    stored = windows.load(key)
    assert stored is not None and stored.version == "v1" and stored.state == '["hi"]'
    assert windows.save(key, '["hi","there"]', "v1", None) is not None
    assert _versions(path) == {
        FACTS_SCHEMA.component: FACTS_SCHEMA.version,
        "windows:conversation_windows": windows_schema("conversation_windows").version,
    }
    windows.store.close()


def test_windows_reopen_runs_no_ddl_and_refuse_a_newer_table(
    tmp_path: Path, statements: list[str]
) -> None:
    path = tmp_path / "local.db"
    key = WindowKey("agent", "", "u1")
    first = SQLiteWindowStore(SQLiteFactStore(path))
    first.save(key, "[]", None, None)
    first.store.close()
    statements.clear()
    again = SQLiteWindowStore(SQLiteFactStore(path))
    assert again.load(key) is not None
    assert _ddl(statements) == []
    again.store.close()
    _set_version(path, "windows:conversation_windows", 99)
    newer = SQLiteWindowStore(SQLiteFactStore(path))
    with pytest.raises(SchemaVersionError, match="'windows:conversation_windows' at schema version 99"):
        newer.load(key)
    newer.store.close()


# -- traces ----------------------------------------------------------------------------


def test_an_old_trace_file_is_converted_from_marshal_to_json(tmp_path: Path) -> None:
    path = tmp_path / "traces.db"
    _write_old_traces(path)
    store = TraceStore(path)
    spans = store.get_trace(TRACE_ID)
    assert [(s.name, s.parent_id) for s in spans] == [
        ("agent.run", None),
        ("memory.read", "1111111111111111"),
    ]
    assert spans[0].attributes == {"agent.input": "hello", "n": 3}
    assert spans[1].attributes == {"memory.blocks": ["a", "b"]}
    assert spans[1].events == [{"name": "hit", "time_ns": 250, "attributes": {"k": 1.5}}]
    runs = store.list_runs()
    assert [(r.trace_id, r.span_count) for r in runs] == [(TRACE_ID, 2)]
    assert store.mined_trace_ids([TRACE_ID, "other"]) == {TRACE_ID}
    store.close()
    conn = sqlite3.connect(path)
    payload, fmt = conn.execute("SELECT spans, format FROM span_batches").fetchone()
    conn.close()
    assert fmt == 1 and bytes(payload).startswith(b"[[")  # JSON now, marked with its format
    assert _versions(path) == {TRACE_SCHEMA.component: TRACE_SCHEMA.version}


def test_new_spans_are_json_and_a_reopen_runs_no_ddl(tmp_path: Path, statements: list[str]) -> None:
    path = tmp_path / "traces.db"
    store = TraceStore(path)
    record = SpanRecord("00000000000000aa", TRACE_ID, None, "agent.run", 1, 2, "OK", {"x": object})
    store.write([record])
    store.close()
    statements.clear()
    again = TraceStore(path)
    (span,) = again.get_trace(TRACE_ID)
    assert span.attributes == {"x": str(object)}  # not JSON: stored as its text
    assert _ddl(statements) == []
    again.close()


def test_a_newer_trace_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "traces.db"
    TraceStore(path).write([SpanRecord("00000000000000aa", TRACE_ID, None, "r", 1, 2)])
    _set_version(path, TRACE_SCHEMA.component, TRACE_SCHEMA.version + 1)
    with pytest.raises(SchemaVersionError, match=r"'traces' at schema version 3.*Upgrade the package"):
        TraceStore(path).list_runs()


def _open_trace_store(path: str, barrier: object, out: object) -> None:
    barrier.wait()  # type: ignore[attr-defined]
    try:
        spans = TraceStore(path).get_trace(TRACE_ID)
        out.put(len(spans))  # type: ignore[attr-defined]
    except Exception as exc:  # reported to the parent, which fails the test
        out.put(repr(exc))  # type: ignore[attr-defined]


@pytest.mark.subprocess
def test_processes_opening_an_old_file_at_once_migrate_it_once(tmp_path: Path) -> None:
    """A second run of the marshal->JSON step would fail (duplicate column) or
    decode JSON as marshal; every opener must see the two spans."""
    path = tmp_path / "traces.db"
    _write_old_traces(path)
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    workers = [
        ctx.Process(target=_open_trace_store, args=(str(path), barrier, out)) for _ in range(4)
    ]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(30)
    assert results == [2, 2, 2, 2]
    assert _versions(path) == {TRACE_SCHEMA.component: TRACE_SCHEMA.version}


# -- connections -----------------------------------------------------------------------


def test_threads_opening_a_new_file_at_once_never_see_database_is_locked(tmp_path: Path) -> None:
    """The WAL switch of a new file raced: "database is locked" without waiting."""
    errors: list[BaseException] = []
    for round_ in range(40):
        path = tmp_path / f"f{round_}.db"
        barrier = threading.Barrier(6)

        def open_one(path: Path = path, barrier: threading.Barrier = barrier) -> None:
            connections = ThreadConnections(lambda: path, [FACTS_SCHEMA])
            barrier.wait()
            try:
                connections.get().execute("SELECT COUNT(*) FROM learned_memory").fetchone()
            except BaseException as exc:  # collected, asserted below
                errors.append(exc)
            finally:
                connections.close()

        threads = [threading.Thread(target=open_one) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
