"""The namespace-index core of the stored vector indexes: MatrixCache (the byte
budget their namespace matrices are held in), NamespaceMatrix, MatrixView,
NamespaceCopies (a store's reported Change applied to a copy), ranked_hits and
the keyword helpers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from fastaiagent.facts.index.front import ranked_hits
from fastaiagent.facts.index.keywords import bm25_top, grouped, query_terms
from fastaiagent.facts.index.matrix import (
    Change,
    MatrixCache,
    MatrixView,
    NamespaceCopies,
    NamespaceMatrix,
    unit_rows,
)
from fastaiagent.kb.protocols import Chunk


@dataclass
class Block:
    nbytes: int


def test_the_least_recently_used_goes_first() -> None:
    cache: MatrixCache[Block] = MatrixCache(limit=30)
    for key in ("a", "b", "c"):
        assert cache.put(key, Block(10))
    cache.touch("a")  # now b is the least recently used
    assert cache.put("d", Block(10))
    assert "b" not in cache and {"a", "c", "d"} == {k for k in "abcd" if k in cache}
    assert cache.held == 30


def test_get_does_not_change_the_order() -> None:
    cache: MatrixCache[Block] = MatrixCache(limit=20)
    cache.put("a", Block(10))
    cache.put("b", Block(10))
    assert cache.get("a") == Block(10)
    cache.put("c", Block(10))
    assert "a" not in cache and cache.get("b") is not None and cache.get("zzz") is None


def test_an_item_larger_than_the_budget_is_not_kept_and_evicts_nothing() -> None:
    cache: MatrixCache[Block] = MatrixCache(limit=25)
    cache.put("a", Block(10))
    cache.put("b", Block(10))
    assert cache.put("huge", Block(26)) is False
    assert "huge" not in cache and "a" in cache and "b" in cache and cache.held == 20
    nothing: MatrixCache[Block] = MatrixCache(limit=0)
    assert nothing.put("a", Block(1)) is False and len(nothing) == 0


def test_an_item_grown_in_place_is_measured_again_when_put_again() -> None:
    cache: MatrixCache[Block] = MatrixCache(limit=30)
    grows = Block(10)
    cache.put("a", Block(10))
    cache.put("g", grows)
    grows.nbytes = 25  # a buffer reallocated larger, same object
    assert cache.put("g", grows)
    assert "a" not in cache and cache.held == 25
    cache.pop("g")
    cache.pop("missing")
    assert cache.held == 0 and len(cache) == 0


def test_clear_forgets_everything() -> None:
    cache: MatrixCache[Block] = MatrixCache(limit=100)
    cache.put("a", Block(10))
    cache.clear()
    assert "a" not in cache and cache.held == 0


def test_keep_newest_holds_the_item_put_last_whatever_its_size() -> None:
    cache: MatrixCache[Block] = MatrixCache(limit=10, keep_newest=True)
    assert cache.put("a", Block(20))
    assert "a" in cache and cache.held == 20
    assert cache.put("b", Block(5))  # the oversized one goes first
    assert "a" not in cache and cache.held == 5
    assert cache.put("c", Block(30))
    assert list(k for k in "abc" if k in cache) == ["c"]


# -- the namespace-index core: matrices, views, copies, results ---------------------


def rows(*vectors: list[float]) -> np.ndarray:
    return unit_rows([list(v) for v in vectors])


def test_a_matrix_grows_in_place_and_a_view_keeps_its_rows() -> None:
    matrix = NamespaceMatrix(2)
    matrix.append(["a", "b"], rows([1, 0], [0, 1]))
    before = matrix.view()
    matrix.append([f"n{i}" for i in range(100)], np.tile(rows([1, 1]), (100, 1)))
    assert len(before.vectors) == 2 and before.keys[:2] == ["a", "b"]
    assert matrix.n == 102 and matrix.last_key(None) == "n99"
    assert NamespaceMatrix(2).last_key(0) == 0
    matrix.upsert(["a", "z"], rows([0, 1], [1, 0]))  # a replaced in place, z appended
    assert matrix.where["a"] == 0 and matrix.where["z"] == 102
    assert matrix.view().vectors[0].tolist() == [0.0, 1.0]


def test_removed_rows_are_masked_then_compacted_into_a_new_matrix() -> None:
    matrix = NamespaceMatrix(2, version=7, epoch=3)
    matrix.append(list("abcd"), rows([1, 0], [0.9, 0.1], [0, 1], [0.5, 0.5]))
    matrix.remove(["a", "missing"])
    view = matrix.view()
    assert view.alive is not None and view.alive.tolist() == [False, True, True, True]
    assert [key for _, key in view.top(np.array([1.0, 0.0], dtype=np.float32), 1)] == ["b"]
    assert matrix.compacted() is matrix  # a quarter masked: not yet
    matrix.remove(["b"])
    fresh = matrix.compacted()
    assert fresh is not matrix and fresh.keys == ["c", "d"] and fresh.dead == 0
    assert (fresh.version, fresh.epoch) == (7, 3)
    assert fresh.where == {"c": 0, "d": 1}


def test_a_view_ranks_the_best_and_scores_the_rows_asked() -> None:
    view = MatrixView(["x", "y", "z"], rows([1, 0], [0, 1], [1, 1]))
    query = np.array([1.0, 0.0], dtype=np.float32)
    assert sorted(key for _, key in view.top(query, 2)) == ["x", "z"]
    assert sorted(key for _, key in view.top(query, 5)) == ["x", "y", "z"]
    assert MatrixView([], np.empty((0, 2), dtype=np.float32)).top(query, 3) == []
    among = dict((key, score) for score, key in view.among(["z", "nope", "x"], query))
    assert among.keys() == {"x", "z"} and among["x"] == pytest.approx(1.0)
    masked = MatrixView(["x", "y"], rows([1, 0], [0, 1]), np.array([False, True]))
    assert masked.among(["x", "y"], query) == [(0.0, "y")]


def test_unit_rows_leave_a_zero_row_zero() -> None:
    matrix = unit_rows([[3.0, 4.0], [0.0, 0.0]])
    assert matrix.dtype == np.float32 and matrix.ravel().tolist() == pytest.approx([0.6, 0.8, 0, 0])


def test_unit_rows_in_place_rescale_only_the_rows_off_unit_length() -> None:
    unit = np.array([0.6, 0.8], dtype=np.float32)
    owned = np.vstack([unit, [3.0, 4.0], [0.0, 0.0]]).astype(np.float32)
    before = owned[0].tobytes()
    assert unit_rows(owned, in_place=True) is owned  # no copy of a matrix made for it
    assert owned[0].tobytes() == before  # kept bit for bit
    assert owned[1:].ravel().tolist() == pytest.approx([0.6, 0.8, 0, 0])
    shared = np.array([[3.0, 4.0]], dtype=np.float32)
    shared.flags.writeable = False  # a view of a store's bytes: copied
    assert unit_rows(shared, in_place=True) is not shared and shared[0, 0] == 3.0


def whole(version: int, keys: list[str], epoch: int = 0) -> Change:
    vectors = rows(*([1.0, float(i)] for i in range(len(keys)))) if keys else np.empty((0, 2))
    return Change(version, epoch, None, keys, vectors)


def test_copies_apply_what_the_store_reports() -> None:
    copies = NamespaceCopies(10**6)
    reports: list[Change | None] = [whole(1, ["a", "b"])]
    seen: list[NamespaceMatrix | None] = []

    def report(held: NamespaceMatrix | None) -> Change | None:
        seen.append(held)
        return reports.pop(0)

    view = copies.refresh("ns", report)
    assert view is not None and view.keys[: len(view.vectors)] == ["a", "b"] and seen == [None]
    held = copies.held("ns")
    assert held is not None and held.version == 1
    reports.append(Change(2, since=1, keys=["c"], vectors=rows([0, 1]), removed=["a"]))
    view = copies.refresh("ns", report)
    assert view is not None and seen[-1] is held
    assert sorted(key for _, key in view.top(np.array([0.0, 1.0], dtype=np.float32), 5)) == ["b", "c"]
    compacted = copies.held("ns")  # a third of it masked: a new matrix
    assert compacted is not None and compacted is not held and compacted.keys == ["b", "c"]
    reports.append(Change(2, since=2))  # nothing changed
    assert copies.refresh("ns", report) is not None and copies.held("ns") is compacted
    reports.append(None)  # the namespace is gone
    assert copies.refresh("ns", report) is None and "ns" not in copies


def test_a_delta_from_a_copy_no_longer_held_reads_the_namespace_whole() -> None:
    copies = NamespaceCopies(10**6)
    copies.settle("ns", whole(5, ["a"], epoch=1))
    reports = [Change(6, 2, since=5, keys=["b"], vectors=rows([0, 1])), whole(6, ["b"], epoch=2)]
    view = copies.refresh("ns", lambda held: reports.pop(0))  # the epoch moved meanwhile
    assert view is not None and view.keys[: len(view.vectors)] == ["b"] and not reports
    assert copies.settle("other", Change(3, since=2)) is None  # no copy to apply it to


def test_a_copy_already_newer_is_kept_and_one_too_big_is_not() -> None:
    copies = NamespaceCopies(10**6)
    copies.settle("ns", whole(9, ["a", "b"]))
    kept = copies.held("ns")
    view = copies.settle("ns", whole(8, ["a"]))  # a slower reader's older read
    assert view is not None and len(view.vectors) == 2 and copies.held("ns") is kept
    tiny = NamespaceCopies(1)
    view = tiny.settle("ns", whole(1, ["a"]))
    assert view is not None and len(view.vectors) == 1
    assert "ns" not in tiny and tiny.too_big == {"ns"}


def test_hits_are_ranked_best_first_without_the_rows_gone_since() -> None:
    chunks = {k: Chunk(k, k.upper()) for k in "abc"}
    found: list[tuple[float, object]] = [(0.5, "c"), (0.9, "b"), (0.5, "a"), (0.7, "gone")]
    hits = ranked_hits(found, 3, lambda keys: {k: chunks[k] for k in keys if k in chunks})
    assert [(h.chunk.id, h.score) for h in hits] == [("b", 0.9), ("c", 0.5)]
    by_key = ranked_hits(found, 4, lambda keys: chunks, ties_by_key=True)
    assert [h.chunk.id for h in by_key] == ["b", "a", "c"]
    assert ranked_hits([], 3, lambda keys: pytest.fail("nothing to read")) == []


def test_keyword_requests_and_postings() -> None:
    assert query_terms("Dogs and cats, dogs!", 3, "n") == ["cat", "dog"]
    assert query_terms("dogs", 0, "n") == []
    with pytest.raises(ValueError, match="namespace cannot be empty"):
        query_terms("dogs", 3, "")
    with pytest.raises(TypeError, match="query must be a str"):
        query_terms(None, 3, "n")  # type: ignore[arg-type]
    postings = [("a", 4, "dog", 2), ("b", 3, "cat", 1), ("a", 4, "cat", 1), ("c", 5, None, 0)]
    assert grouped(postings) == [("a", 4, {"dog": 2, "cat": 1}), ("b", 3, {"cat": 1}), ("c", 5, {})]


def test_a_whole_namespace_made_for_the_copy_is_taken_over_and_a_view_of_bytes_is_copied() -> None:
    copies = NamespaceCopies(10**6)
    made = rows([1, 0], [0, 1])
    copies.settle("made", Change(1, keys=["a", "b"], vectors=made))
    held = copies.held("made")
    assert held is not None and held.buffer is made
    read_only = np.frombuffer(made.tobytes(), dtype=np.float32).reshape(2, 2)
    copies.settle("bytes", Change(1, keys=["a", "b"], vectors=read_only))
    held = copies.held("bytes")
    assert held is not None and held.buffer.flags.writeable and len(held.buffer) > 2
    assert held.view().vectors.tolist() == made.tolist()


def test_bm25_ranks_by_document_and_an_empty_namespace_finds_nothing() -> None:
    lengths = {"a": 4, "b": 3, "c": 9}
    frequency = {"dog": 2, "cat": 2, "owl": 0}
    rows = [(cid, lengths[cid], counts) for cid, counts in
            (("a", {"dog": 2, "cat": 1}), ("b", {"cat": 1}), ("c", {"dog": 1}))]
    by_doc = bm25_top(frequency, rows, 10, 60, 3)
    assert [c for c, _ in by_doc] == ["a", "b", "c"]
    assert bm25_top(frequency, rows, 0, 0, 3) == []
