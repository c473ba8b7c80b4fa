"""SQLite specifics of the store-backed vector index: raw tables after deletes, schema
version, a file written before vectors, the in-memory copies, other processes."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _env import require_module
from fastaiagent.errors import SchemaVersionError
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.sqlite.store import SQLiteFactStore
from fastaiagent.facts.vectors import HoldsVectors, text_key
from fastaiagent.kb.bm25 import tokenize
from fastaiagent.kb.protocols import Chunk, DimensionMismatchError

require_module("numpy")

from fastaiagent.facts.sqlite.vectors import SQLiteVectorIndex  # noqa: E402
from fastaiagent.facts.sqlite.vectors_schema import vectors_schema  # noqa: E402

T = "memory_vectors"
TABLES = (T, f"{T}_vec", f"{T}_cache", f"{T}_ns", f"{T}_kw", f"{T}_keys")


def _chunk(cid: str, namespace: str, text: str, vector: list[float]) -> Chunk:
    return Chunk(cid, text, vector, {"namespace": namespace})


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
def index(path: Path) -> Iterator[SQLiteVectorIndex]:
    store = SQLiteFactStore(path)
    made = store.vector_store()
    assert isinstance(made, SQLiteVectorIndex)
    yield made
    store.close()


def _raw(path: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _unseal(conn: sqlite3.Connection) -> None:
    """Back to the plain keyword tokens of version 3 (the update triggers keep FTS5 in step)."""
    for rid, namespace, text in conn.execute(f"SELECT rid, namespace, text FROM {T}").fetchall():
        nskey = "n" + hashlib.sha256(namespace.encode()).hexdigest()[:32]
        conn.execute(f"UPDATE {T} SET nskey = ?, keywords = ? WHERE rid = ?", (nskey, " ".join(tokenize(text)), rid))
    conn.execute(f"DROP TABLE {T}_keys")


def _fts_blocks(path: Path) -> bytes:
    return b"".join(row[0] or b"" for row in _raw(path, f"SELECT block FROM {T}_fts_data"))


def _fts_rows(path: Path) -> int:
    """Documents in the FTS index itself (its docsize shadow table: one row per document)."""
    return int(_raw(path, f"SELECT COUNT(*) FROM {T}_fts_docsize")[0][0])


def _fill(index: SQLiteVectorIndex) -> None:
    for ns in ("user:alice", "user:bob"):
        index.add([_chunk(f"{ns}-{i}", ns, f"Jane lives in Lisbon {i}", [1.0, i, 0.0]) for i in range(5)])
        index.cache_embeddings("m@3", ns, {text_key("Jane"): [1.0, 0.0, 0.0]})


def test_the_fact_store_holds_vectors(path: Path) -> None:
    store = SQLiteFactStore(path)
    assert isinstance(store, HoldsVectors)
    # One index per store: its in-memory matrices are shared by every caller.
    assert store.vector_store() is store.vector_store()
    store.close()


def test_delete_namespace_leaves_no_row_of_it_in_any_table(index: SQLiteVectorIndex, path: Path) -> None:
    _fill(index)
    assert _fts_rows(path) == 10
    assert index.delete_namespace("user:alice") == 5
    for table in TABLES:
        assert _raw(path, f"SELECT COUNT(*) FROM {table} WHERE namespace = 'user:alice'") == [(0,)], table
        assert _raw(path, f"SELECT COUNT(*) FROM {table} WHERE namespace = 'user:bob'")[0][0] > 0, table
    assert _raw(path, f"SELECT COUNT(*) FROM {T}_dropping") == [(0,)]
    # Alice's sealed postings stay until reclaimed (deleting them cost FTS5 merges
    # mid-forget); nothing matches them: her secret is gone.
    assert _fts_rows(path) == 10
    assert index.keyword_search("Jane", 10, namespace="user:alice") == []
    index.add([_chunk("again", "user:alice", "Jane is back", [1.0, 0.0, 0.0])])
    assert [i for i, _ in index.keyword_search("Jane", 10, namespace="user:alice")] == ["again"]
    index.reclaim_keyword_space()
    assert _fts_rows(path) == 6
    # The postings left are exactly the rows': FTS5's own consistency check passes.
    _raw(path, f"INSERT INTO {T}_fts ({T}_fts) VALUES ('integrity-check')")
    assert index.keyword_search("Jane", 10, namespace="user:bob")


def test_delete_by_id_removes_the_row_and_its_postings(index: SQLiteVectorIndex, path: Path) -> None:
    _fill(index)
    assert index.delete(["user:alice-0", "user:alice-1"]) == 2
    assert _raw(path, f"SELECT COUNT(*) FROM {T} WHERE id IN ('user:alice-0', 'user:alice-1')") == [(0,)]
    assert _fts_rows(path) == 8
    assert _raw(path, f"SELECT COUNT(*) FROM {T}_vec") == [(8,)]
    assert index.delete([f"user:alice-{i}" for i in range(2, 5)]) == 3
    assert _raw(path, f"SELECT COUNT(*) FROM {T}_ns WHERE namespace = 'user:alice'") == [(0,)]
    _raw(path, f"INSERT INTO {T}_fts ({T}_fts) VALUES ('integrity-check')")


def test_upsert_keeps_one_row_and_one_posting_per_id(index: SQLiteVectorIndex, path: Path) -> None:
    for n in range(3):
        index.add([_chunk("a", "n", f"version {n} of the text", [1.0, n, 0.0])])
    assert _raw(path, f"SELECT COUNT(*) FROM {T}") == [(1,)]
    assert _raw(path, f"SELECT COUNT(*) FROM {T}_vec") == [(1,)]
    assert _fts_rows(path) == 1
    assert [i for i, _ in index.keyword_search("version", 5, namespace="n")] == ["a"]


def test_vectors_are_stored_as_unit_float32(index: SQLiteVectorIndex, path: Path) -> None:
    index.add([_chunk("a", "n", "x", [3.0, 4.0, 0.0])])
    ((blob, dimension),) = _raw(path, f"SELECT v.vector, c.dimension FROM {T} c JOIN {T}_vec v USING (rid)")
    assert dimension == 3 and len(blob) == 3 * 4
    import numpy as np

    assert np.frombuffer(blob, dtype=np.float32).tolist() == pytest.approx([0.6, 0.8, 0.0])


def test_schema_version_is_recorded_and_a_newer_one_is_refused(index: SQLiteVectorIndex, path: Path) -> None:
    index.add([_chunk("a", "n", "x", [1.0, 0.0])])
    assert _raw(path, "SELECT version FROM fastaiagent_schema WHERE component = ?", f"vectors:{T}") == [
        (vectors_schema(T).version,)
    ]
    conn = sqlite3.connect(path)
    conn.execute("UPDATE fastaiagent_schema SET version = 99 WHERE component = ?", (f"vectors:{T}",))
    conn.commit()
    conn.close()
    store = SQLiteFactStore(path)
    with pytest.raises(SchemaVersionError, match=f"'vectors:{T}' at schema version 99"):
        store.vector_store().search([1.0, 0.0], 3, namespace="n")
    store.close()


def test_a_file_written_before_vectors_gains_them_and_keeps_its_facts(path: Path) -> None:
    old = SQLiteFactStore(path)
    old.add(Fact("likes tea", scope="user", scope_id="alice"))
    old.close()
    assert not _raw(path, "SELECT name FROM sqlite_master WHERE name = ?", T)
    store = SQLiteFactStore(path)
    index = store.vector_store()
    index.add([_chunk("a", "user:alice", "likes tea", [1.0, 0.0])])
    assert [f.fact for f in store.list_active("user", "alice")] == ["likes tea"]
    assert [h.chunk.id for h in index.search([1.0, 0.0], 3, namespace="user:alice")] == ["a"]
    store.close()


def test_asked_dimension_must_match_the_file(index: SQLiteVectorIndex, path: Path) -> None:
    index.add([_chunk("a", "n", "x", [1.0, 0.0, 0.0])])
    store = SQLiteFactStore(path)
    with pytest.raises(DimensionMismatchError, match="has dimension 3, but dimension=8 was asked"):
        SQLiteVectorIndex(store, dimension=8).count()
    assert SQLiteVectorIndex(store, dimension=3).dimension == 3
    store.close()


@pytest.mark.parametrize("cache_bytes", [0, 200])
def test_results_do_not_depend_on_the_memory_budget(path: Path, cache_bytes: int) -> None:
    store = SQLiteFactStore(path)
    index = SQLiteVectorIndex(store, cache_bytes=cache_bytes)
    for ns in ("a", "b", "c"):  # 200 bytes holds one small namespace at most: evictions
        index.add([_chunk(f"{ns}{i}", ns, "t", [1.0, i, 0.0]) for i in range(4)])
    for _ in range(2):
        for ns in ("a", "b", "c"):
            hits = index.search([1.0, 3.0, 0.0], 2, namespace=ns)
            assert [h.chunk.id for h in hits] == [f"{ns}3", f"{ns}2"]
    store.close()


def test_bad_table_name_and_store_type_are_refused(path: Path) -> None:
    store = SQLiteFactStore(path)
    with pytest.raises(ValueError, match="table 'x; drop' must be a plain identifier"):
        SQLiteVectorIndex(store, table="x; drop")
    with pytest.raises(TypeError, match="SQLiteVectorIndex needs a SQLiteFactStore, got str"):
        SQLiteVectorIndex("memory.db")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cache_bytes must be an int"):
        SQLiteVectorIndex(store, cache_bytes=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="metadata must be JSON-serialisable"):
        store.vector_store().add([Chunk("a", "x", [1.0], {"namespace": "n", "when": object()})])
    store.close()


_CHILD = """
import sys
from fastaiagent.facts.sqlite.store import SQLiteFactStore
from fastaiagent.kb.protocols import Chunk
index = SQLiteFactStore(sys.argv[1]).vector_store()
action = sys.argv[2]
if action == "add":
    index.add([Chunk("child", "a note from another process", [0.0, 1.0], {"namespace": "n"})])
else:
    index.delete_namespace("n")
"""


@pytest.mark.subprocess
def test_another_process_writes_are_seen_by_a_warm_index(index: SQLiteVectorIndex, path: Path) -> None:
    index.add([_chunk("mine", "n", "mine", [1.0, 0.0])])
    assert [h.chunk.id for h in index.search([0.0, 1.0], 5, namespace="n")] == ["mine"]  # warm copy
    for action in ("add", "delete"):
        subprocess.run([sys.executable, "-c", _CHILD, str(path), action], check=True, timeout=60)
        hits = [h.chunk.id for h in index.search([0.0, 1.0], 5, namespace="n")]
        assert hits == (["child", "mine"] if action == "add" else []), action
    assert index.keyword_search("note", 5, namespace="n") == []


def test_random_writes_from_two_objects_match_a_brute_force_reference(path: Path) -> None:
    """Adds, upserts and deletes from two objects on one file (each keeps its own
    in-memory copies, masks its own deletes, reads the other's changes): every
    search equals an exact search over what the file holds."""
    import numpy as np

    rng = np.random.default_rng(3)
    stores = [SQLiteFactStore(path), SQLiteFactStore(path)]
    objects = [s.vector_store() for s in stores]
    truth: dict[str, tuple[str, np.ndarray]] = {}  # id -> (namespace, unit vector)
    for step in range(400):
        index = objects[rng.integers(2)]
        ns = f"user:{rng.integers(2)}"
        roll = rng.random()
        if roll < 0.45 or not truth:
            cid = f"c{rng.integers(60)}"  # a small id space: many upserts
            vector = rng.standard_normal(8).astype(np.float32)
            index.add([_chunk(cid, ns, f"text {cid}", vector.tolist())])
            truth[cid] = (ns, vector / np.linalg.norm(vector))
        elif roll < 0.6:
            doomed = [str(c) for c in rng.choice(sorted(truth), size=min(3, len(truth)), replace=False)]
            assert index.delete(doomed) == len(doomed)
            for cid in doomed:
                del truth[cid]
        query = rng.standard_normal(8).astype(np.float32)
        mine = {cid: float(v @ query) / float(np.linalg.norm(query)) for cid, (n, v) in truth.items() if n == ns}
        expected = sorted(mine, key=lambda cid: -mine[cid])[:5]
        hits = index.search(query.tolist(), 5, namespace=ns)
        assert [h.chunk.id for h in hits] == expected, step
        assert [h.score for h in hits] == pytest.approx([mine[c] for c in expected], abs=1e-5)
    for store in stores:
        store.close()


def test_keyword_scores_use_the_namespaces_own_statistics(index: SQLiteVectorIndex) -> None:
    index.add([_chunk("a1", "a", "Jane moved to Lisbon", [1.0, 0.0]), _chunk("a2", "a", "Lisbon is sunny", [0.0, 1.0])])
    before = index.keyword_search("Jane Lisbon", 5, namespace="a")
    # Another user says "Lisbon" a thousand times: user a's ranking and scores stay put.
    index.add([_chunk(f"b{i}", "b", f"Lisbon trip number {i}", [1.0, 1.0]) for i in range(1000)])
    assert index.keyword_search("Jane Lisbon", 5, namespace="a") == before
    assert [chunk_id for chunk_id, _ in before] == ["a1", "a2"]


def test_a_version_1_vector_table_gains_keyword_statistics(path: Path) -> None:
    store = SQLiteFactStore(path)
    index = store.vector_store()
    index.add([_chunk("a1", "a", "Jane moved to Lisbon", [1.0, 0.0]), _chunk("a2", "a", "Lisbon is sunny", [0.0, 1.0])])
    expected = index.keyword_search("Jane Lisbon", 5, namespace="a")
    store.close()
    conn = sqlite3.connect(path)  # back to the layout of version 1
    _unseal(conn)
    for trigger in ("ai", "ad", "au"):
        conn.execute(f"DROP TRIGGER {T}_kw_{trigger}")
    conn.execute(f"DROP TABLE {T}_kw")
    conn.execute("UPDATE fastaiagent_schema SET version = 1 WHERE component = ?", (f"vectors:{T}",))
    conn.commit()
    conn.close()
    reopened = SQLiteFactStore(path)
    assert reopened.vector_store().keyword_search("Jane Lisbon", 5, namespace="a") == expected
    assert _raw(path, f"SELECT namespace, docs, tokens FROM {T}_kw") == [("a", 2, 5)]  # "to" and "is" are stop words
    assert _raw(path, "SELECT version FROM fastaiagent_schema WHERE component = ?", f"vectors:{T}") == [
        (vectors_schema(T).version,)
    ]
    reopened.close()


def _dated(cid: str, namespace: str, vector: list[float], at: float | None) -> Chunk:
    metadata: dict[str, Any] = {"namespace": namespace}
    if at is not None:
        metadata["created_at"] = at
    return Chunk(cid, f"message {cid}", vector, metadata)


def test_search_recorded_ranks_only_the_namespaces_chunks_of_the_spans(index: SQLiteVectorIndex) -> None:
    day = 86400.0
    index.add([_dated(f"a{i}", "a", [1.0, i / 10], 1000 * day + i * day) for i in range(10)])
    index.add([_dated("undated", "a", [1.0, 0.0], None), _dated("b3", "b", [1.0, 0.3], 1003 * day)])
    spans = [(1002 * day, 1004 * day), (1008 * day, 1008.5 * day)]  # days 2, 3 and 8 (a8 is at 00:00)
    hits = index.search_recorded([1.0, 0.0], 5, namespace="a", spans=spans)
    assert [hit.chunk.id for hit in hits] == ["a2", "a3", "a8"]  # closest first; b3 is b's
    assert hits[0].score > hits[1].score > hits[2].score
    assert [h.chunk.id for h in index.search_recorded([1.0, 0.0], 1, namespace="a", spans=spans)] == ["a2"]
    index.delete(["a2"])
    assert [h.chunk.id for h in index.search_recorded([1.0, 0.0], 5, namespace="a", spans=spans)] == ["a3", "a8"]
    assert [h.chunk.id for h in index.search_recorded([1.0, 0.0], 5, namespace="b", spans=spans)] == ["b3"]
    assert index.search_recorded([1.0, 0.0], 5, namespace="a", spans=[]) == []
    assert index.search_recorded([1.0, 0.0], 5, namespace="nobody", spans=spans) == []


def test_a_span_holding_too_many_chunks_lists_none(index: SQLiteVectorIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    import fastaiagent.facts.sqlite.vectors as module

    index.add([_dated(f"a{i}", "a", [1.0, float(i)], float(i)) for i in range(6)])
    monkeypatch.setattr(module, "RECORDED_LIMIT", 5)
    assert index.search_recorded([1.0, 0.0], 3, namespace="a", spans=[(0.0, 6.0)]) == []
    assert len(index.search_recorded([1.0, 0.0], 3, namespace="a", spans=[(0.0, 5.0)])) == 3


def test_a_version_2_vector_table_gains_the_time_index(path: Path) -> None:
    store = SQLiteFactStore(path)
    store.vector_store().add([_dated("a1", "a", [1.0, 0.0], 50.0), _dated("a2", "a", [0.0, 1.0], 500.0)])
    store.close()
    conn = sqlite3.connect(path)  # back to the layout of version 2
    _unseal(conn)
    conn.execute(f"DROP INDEX idx_{T}_recorded")
    conn.execute("UPDATE fastaiagent_schema SET version = 2 WHERE component = ?", (f"vectors:{T}",))
    conn.commit()
    conn.close()
    reopened = SQLiteFactStore(path)
    hits = reopened.vector_store().search_recorded([1.0, 1.0], 5, namespace="a", spans=[(0.0, 100.0)])
    assert [hit.chunk.id for hit in hits] == ["a1"]
    plan = _raw(
        path,
        f"EXPLAIN QUERY PLAN SELECT rid FROM {T} WHERE namespace = 'a' "
        "AND json_extract(metadata, '$.created_at') >= 0 AND json_extract(metadata, '$.created_at') < 1",
    )
    assert f"idx_{T}_recorded" in plan[0][-1]  # a range read, not a scan of every row
    reopened.close()


def test_keyword_tokens_are_sealed_per_namespace(index: SQLiteVectorIndex, path: Path) -> None:
    index.add([_chunk("a1", "a", "zanzibar holiday", [1.0, 0.0]), _chunk("b1", "b", "zanzibar holiday", [1.0, 0.0])])
    rows = dict(_raw(path, f"SELECT namespace, keywords FROM {T}"))
    assert "zanzibar" not in rows["a"] and rows["a"] != rows["b"]  # the same words, other tokens
    assert b"zanzibar" not in _fts_blocks(path)
    assert [cid for cid, _ in index.keyword_search("zanzibar", 5, namespace="a")] == ["a1"]
    # Forgetting a namespace deletes its secret: what FTS5 still holds of it names no word.
    index.delete_namespace("a")
    assert _raw(path, f"SELECT namespace FROM {T}_keys") == [("b",)]
    assert [cid for cid, _ in index.keyword_search("zanzibar", 5, namespace="b")] == ["b1"]
    index.add([_chunk("a2", "a", "zanzibar again", [1.0, 0.0])])  # a new secret, a fresh start
    assert [cid for cid, _ in index.keyword_search("zanzibar", 5, namespace="a")] == ["a2"]


def test_a_version_3_vector_table_has_its_plain_tokens_sealed(path: Path) -> None:
    store = SQLiteFactStore(path)
    store.vector_store().add([_chunk(f"a{i}", "a", f"zanzibar trip {i}", [1.0, float(i)]) for i in range(20)])
    expected = store.vector_store().keyword_search("zanzibar trip 3", 5, namespace="a")
    store.close()
    conn = sqlite3.connect(path)
    _unseal(conn)
    conn.execute("UPDATE fastaiagent_schema SET version = 3 WHERE component = ?", (f"vectors:{T}",))
    conn.commit()
    conn.close()
    assert b"zanzibar" in _fts_blocks(path)
    reopened = SQLiteFactStore(path)
    assert reopened.vector_store().keyword_search("zanzibar trip 3", 5, namespace="a") == expected
    assert b"zanzibar" not in _fts_blocks(path)  # 'optimize' rewrote the segments
    _raw(path, f"INSERT INTO {T}_fts ({T}_fts) VALUES ('integrity-check')")
    reopened.close()


def test_the_version_6_upgrade_stems_older_rows_again(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastaiagent.facts import vectors as facts_vectors

    monkeypatch.setattr(facts_vectors, "tokenize", lambda text: text.casefold().split())  # unstemmed
    store = SQLiteFactStore(path)
    store.vector_store().add([
        _chunk("a1", "a", "we moved to uv", [1.0, 0.0]),
        _chunk("b1", "b", "moving house", [0.0, 1.0]),
    ])  # fmt: skip
    assert store.vector_store().keyword_search("moving", 5, namespace="a") == []
    store.close()
    monkeypatch.undo()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE fastaiagent_schema SET version = 5 WHERE component = ?", (f"vectors:{T}",))
    conn.commit()
    conn.close()
    reopened = SQLiteFactStore(path)
    assert [cid for cid, _ in reopened.vector_store().keyword_search("moving", 5, namespace="a")] == ["a1"]
    assert [cid for cid, _ in reopened.vector_store().keyword_search("moved", 5, namespace="b")] == ["b1"]
    assert _raw(path, "SELECT version FROM fastaiagent_schema WHERE component = ?", f"vectors:{T}") == [(6,)]
    reopened.close()


def test_the_version_4_upgrade_tokenizes_older_rows_again(path: Path) -> None:
    store = SQLiteFactStore(path)
    store.vector_store().add([_chunk("a1", "a", "伴娘请了我大学室友林晓雨", [1.0, 0.0])])
    store.close()
    conn = sqlite3.connect(path)
    _unseal(conn)  # as version 3 wrote it, with the clause as one token (the old tokenizer)
    conn.execute(f"UPDATE {T} SET keywords = '伴娘请了我大学室友林晓雨'")
    conn.execute("UPDATE fastaiagent_schema SET version = 3 WHERE component = ?", (f"vectors:{T}",))
    conn.commit()
    conn.close()
    reopened = SQLiteFactStore(path)
    assert [cid for cid, _ in reopened.vector_store().keyword_search("伴娘是谁", 5, namespace="a")] == ["a1"]
    reopened.close()
