"""The shared StoredVectorIndex conformance suite, importable by anyone's tests.

Subclass :class:`StoredVectorIndexConformance` and override the ``open_index``
fixture: it returns a function that opens a *new* index object on one and the
same storage (a fresh, empty one per test), the way a restarted process or a
second worker would::

    import pytest
    from fastaiagent.facts.sqlite.store import SQLiteFactStore
    from fastaiagent.facts.conformance import StoredVectorIndexConformance

    class TestMyIndex(StoredVectorIndexConformance):
        @pytest.fixture
        def open_index(self, tmp_path):
            stores = []

            def opener():
                stores.append(SQLiteFactStore(tmp_path / "memory.db"))
                return stores[-1].vector_store()

            yield opener
            for store in stores:
                store.close()

``index`` (the first object) is opened from it. Every ``test_*`` method then
runs: cosine ranking, upsert by id (also moving a chunk to another
namespace), namespace isolation of vector and keyword search (namespaces that
are prefixes of each other or hold glob / SQL characters included), ``ids``,
``get``, ``delete``, ``delete_namespace`` (the namespace's cached embeddings
too), ``forget_cached`` where the index has it, the embedding cache per
identity and namespace, dimension mismatch,
freshness between two objects on the same storage (what one writes or
deletes the other sees at once), concurrent writers, and, for an index with
the optional ``search_recorded`` (``ListsRecorded``), search among the
chunks recorded in spans of time, and, for one with ``newest``
(``ListsNewest``), a namespace's chunks paged newest first. Reading a backend's
raw tables or keys after a delete is backend-specific: do it in your own tests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pytest

from fastaiagent.facts.vectors import (
    ListsNewest,
    ListsRecorded,
    StoredVectorIndex,
    embedder_identity,
    text_key,
)
from fastaiagent.kb.protocols import Chunk, DimensionMismatchError, SearchHit, VectorStore

__all__ = ["StoredVectorIndexConformance"]

DIM = 4
# Namespaces that break naive prefix matching, glob patterns, SQL or key building.
NASTY_NAMESPACES = ("user:a", "user:a:b", "user:*", "%", "user:a%", "'; --", "{tag}", "日本")



class Index(StoredVectorIndex, VectorStore, Protocol):
    """What the suite tests: the StoredVectorIndex contract, which is a VectorStore."""


Opener = Callable[[], Index]


def vec(*xs: float) -> list[float]:
    """A DIM-long vector starting with ``xs``."""
    return list(xs) + [0.0] * (DIM - len(xs))


def chunk(cid: str, v: list[float], namespace: str | None, text: str | None = None, **meta: Any) -> Chunk:
    """A chunk tagged ``namespace`` (None: untagged)."""
    metadata = dict(meta)
    if namespace is not None:
        metadata["namespace"] = namespace
    return Chunk(id=cid, text=text if text is not None else f"text of {cid}", vector=v, metadata=metadata)


def ids_of(hits: list[SearchHit]) -> list[str]:
    return [hit.chunk.id for hit in hits]


def keyword_ids(index: Index, query: str, namespace: str, top_k: int = 10) -> list[str]:
    return [chunk_id for chunk_id, _ in index.keyword_search(query, top_k, namespace=namespace)]


class StoredVectorIndexConformance:
    """Base class of the conformance tests; override the ``open_index`` fixture."""

    @pytest.fixture
    def open_index(self) -> Iterator[Opener]:
        """A function opening a new index object on one fresh storage; override it."""
        pytest.fail("override the `open_index` fixture in your test class")
        yield  # pragma: no cover

    @pytest.fixture
    def index(self, open_index: Opener) -> Iterator[Index]:
        """The first index object on the test's storage."""
        made = open_index()
        yield made
        made.close()

    # -- the contract --------------------------------------------------------

    def test_is_a_stored_vector_index_and_a_vector_store(self, index: Index) -> None:
        assert isinstance(index, StoredVectorIndex)
        assert isinstance(index, VectorStore)

    def test_search_ranks_by_cosine_with_text_and_metadata(self, index: Index) -> None:
        index.add(
            [
                chunk("a", vec(1, 0), "n", importance=0.5, tags=["x", {"y": 1}]),
                chunk("b", vec(1, 1), "n"),
                chunk("c", vec(0, 1), "n"),
            ]
        )
        hits = index.search(vec(2, 0), top_k=3, namespace="n")
        assert ids_of(hits) == ["a", "b", "c"]
        assert hits[0].score == pytest.approx(1.0, abs=1e-5)
        assert hits[1].score == pytest.approx(0.7071, abs=1e-3)
        assert hits[2].score == pytest.approx(0.0, abs=1e-5)
        assert hits[0].chunk.text == "text of a"
        assert hits[0].chunk.metadata == {"namespace": "n", "importance": 0.5, "tags": ["x", {"y": 1}]}
        assert ids_of(index.search(vec(2, 0), top_k=1, namespace="n")) == ["a"]
        assert index.search(vec(2, 0), top_k=0, namespace="n") == []
        assert index.search(vec(2, 0), top_k=3, namespace="nobody") == []

    def test_search_of_an_empty_index_is_empty(self, index: Index) -> None:
        assert index.search(vec(1), 5, namespace="n") == []
        assert index.keyword_search("anything at all", 5, namespace="n") == []
        assert index.ids("n") == set()

    def test_upsert_replaces_by_id_and_can_move_namespace(self, index: Index) -> None:
        index.add([chunk("a", vec(1, 0), "n1", text="apples in the orchard")])
        index.add([chunk("a", vec(0, 1), "n2", text="bananas on the boat")])
        assert index.count() == 1
        assert index.search(vec(1, 0), 5, namespace="n1") == []
        assert index.ids("n1") == set() and index.ids("n2") == {"a"}
        assert keyword_ids(index, "apples orchard", "n1") == []
        assert keyword_ids(index, "apples orchard", "n2") == []
        assert keyword_ids(index, "bananas", "n2") == ["a"]
        (hit,) = index.search(vec(0, 1), 5, namespace="n2")
        assert hit.chunk.text == "bananas on the boat"
        assert hit.score == pytest.approx(1.0, abs=1e-5)

    def test_last_write_wins_within_one_batch(self, index: Index) -> None:
        index.add([chunk("a", vec(1), "n", text="first"), chunk("a", vec(0, 1), "n", text="second")])
        assert [c.text for c in index.get(["a"])] == ["second"]
        assert index.count("n") == 1

    def test_namespaces_never_leak_in_vector_or_keyword_search(self, index: Index) -> None:
        index.add(
            [chunk(f"c{n}", vec(1, n), ns, text=f"my sister Jane lives in Lisbon ({n})")
             for n, ns in enumerate(NASTY_NAMESPACES)]
        )
        for n, ns in enumerate(NASTY_NAMESPACES):
            assert ids_of(index.search(vec(1, n), 10, namespace=ns)) == [f"c{n}"], ns
            assert keyword_ids(index, "where does Jane live?", ns) == [f"c{n}"], ns
            assert index.ids(ns) == {f"c{n}"}
            assert index.count(ns) == 1

    def test_a_busy_namespace_does_not_crowd_out_a_quiet_one(self, index: Index) -> None:
        index.add(
            [
                chunk("mine", vec(0, 1), "quiet", text="the red kite"),
                chunk("loose", vec(1, 0.1), None, text="a red kite untagged"),
                *[chunk(f"busy{i}", vec(1, 0.01 * i), "busy", text=f"red kite {i}") for i in range(30)],
            ]
        )
        assert ids_of(index.search(vec(1, 0), top_k=5, namespace="quiet")) == ["mine"]
        both = index.search(vec(1, 0), top_k=5, namespace="quiet", include_untagged=True)
        assert set(ids_of(both)) == {"mine", "loose"}
        busy = index.search(vec(1, 0), top_k=40, namespace="busy")
        assert len(busy) == 30 and all(h.chunk.id.startswith("busy") for h in busy)
        assert len(index.search(vec(1, 0), top_k=100)) == 32  # None = everything
        assert keyword_ids(index, "red kite", "quiet") == ["mine"]
        assert index.count() == 32 and index.count("busy") == 30

    def test_keyword_search_ranks_best_first(self, index: Index) -> None:
        index.add(
            [
                chunk("both", vec(1), "n", text="Jane moved to Lisbon with her cat"),
                chunk("one", vec(1), "n", text="Lisbon is sunny"),
                chunk("none", vec(1), "n", text="the weather in Oslo"),
                *[chunk(f"f{i}", vec(1), "n", text=f"filler note number {i}") for i in range(20)],
            ]
        )
        found = index.keyword_search("Jane Lisbon", 10, namespace="n")
        assert [chunk_id for chunk_id, _ in found] == ["both", "one"]
        assert found[0][1] > found[1][1] > 0
        assert keyword_ids(index, "Jane Lisbon", "n", top_k=1) == ["both"]
        assert index.keyword_search("Jane Lisbon", 0, namespace="n") == []

    def test_a_common_word_does_not_crowd_out_the_rare_one(self, index: Index) -> None:
        """A word in more messages than one search scores (Ana in all 601) leaves the
        message holding the query's rare word first, scored as the in-process BM25
        scores it; asked for the common word alone, the newest messages answer."""
        from fastaiagent.kb.bm25 import BM25Index

        texts = ["Ana booked the dentist for Tuesday"] + [f"Ana said hello number {i}" for i in range(600)]
        for first in range(0, len(texts), 100):  # a write's chunks are equally new: 100 a write
            index.add([
                chunk(f"m{i}", vec(1), "a", text=texts[i], created_at=float(i))
                for i in range(first, min(first + 100, len(texts)))
            ])  # fmt: skip
        index.add([chunk("other", vec(1), "b", text="Ana and the dentist", created_at=0.0)])
        found = index.keyword_search("When is Ana's dentist?", 5, namespace="a")
        reference = BM25Index()
        for i, text in enumerate(texts):
            reference.add(f"m{i}", text)
        expected = reference.search("When is Ana's dentist?", 1)
        assert found[0][0] == "m0" == expected[0][0]
        assert found[0][1] == pytest.approx(expected[0][1], rel=1e-6)
        assert set(keyword_ids(index, "Ana", "a", top_k=3)) <= {f"m{i}" for i in range(401, 601)}

    def test_keyword_search_also_finds_the_context_turn(self, index: Index) -> None:
        # Recall stores the turn before a message in metadata["context"]; the
        # in-process BM25 always indexed it with the message, so the store does too.
        index.add(
            [
                chunk("reply", vec(1), "n", text="Sounds lovely, bring sandwiches", context="the picnic on Saturday"),
                chunk("other", vec(1), "n", text="the weather in Oslo", context=7),
            ]
        )
        assert keyword_ids(index, "picnic", "n") == ["reply"]
        assert keyword_ids(index, "Oslo", "n") == ["other"]  # a non-str context is ignored

    def test_keyword_search_takes_any_text(self, index: Index) -> None:
        index.add([chunk("a", vec(1), "n", text="cats AND dogs OR birds")])
        for query in ('"', "AND OR NOT", "NEAR(cats)", "cats*", "(", "-cats", "cats:dogs", "'; --", "日本"):
            index.keyword_search(query, 5, namespace="n")  # no syntax error, whatever it finds
        assert index.keyword_search("the of and", 5, namespace="n") == []  # stop words only
        assert index.keyword_search("", 5, namespace="n") == []
        assert keyword_ids(index, 'cats" OR "dogs', "n") == ["a"]

    def test_get_keeps_the_order_asked_and_leaves_out_missing(self, index: Index) -> None:
        index.add([chunk("a", vec(1), "n"), chunk("b", vec(0, 1), "n"), chunk("u", vec(0, 0, 1), None)])
        assert [c.id for c in index.get(["b", "missing", "a", "u"])] == ["b", "a", "u"]
        assert index.get([]) == []
        assert sorted(c.id for c in index.chunks("n")) == ["a", "b"]

    def test_delete_by_id_removes_vectors_and_keywords(self, index: Index) -> None:
        index.add(
            [chunk("a1", vec(1), "a", text="alpha one"), chunk("a2", vec(1, 1), "a", text="alpha two"),
             chunk("b1", vec(1), "b", text="alpha bee")]
        )
        index.search(vec(1), 5, namespace="a")  # warm whatever the backend keeps in memory
        assert index.delete(["a1", "missing"]) == 1
        assert index.delete(["a1"]) == 0
        assert index.delete([]) == 0
        assert ids_of(index.search(vec(1), 5, namespace="a")) == ["a2"]
        assert keyword_ids(index, "alpha", "a") == ["a2"]
        assert index.ids("a") == {"a2"} and index.ids("b") == {"b1"}
        assert index.get(["a1"]) == []
        with pytest.raises(TypeError, match=r"delete\(\) takes a list of ids"):
            index.delete("a2")

    def test_delete_namespace_removes_everything_of_it_only(self, index: Index) -> None:
        ident = embedder_identity("model", DIM)
        for ns in ("user:a", "user:a:b"):
            index.add([chunk(f"{ns}-{i}", vec(1, i), ns, text=f"kite {i}") for i in range(3)])
            index.cache_embeddings(ident, ns, {text_key("kite"): vec(1)})
        index.search(vec(1), 5, namespace="user:a")  # warm
        assert index.delete_namespace("user:a") == 3
        assert index.delete_namespace("user:a") == 0
        assert index.search(vec(1), 5, namespace="user:a") == []
        assert index.keyword_search("kite", 5, namespace="user:a") == []
        assert index.ids("user:a") == set() and index.count("user:a") == 0
        assert index.cached_embeddings(ident, "user:a", [text_key("kite")]) == {}
        assert index.count("user:a:b") == 3 and len(keyword_ids(index, "kite", "user:a:b")) == 3
        assert list(index.cached_embeddings(ident, "user:a:b", [text_key("kite")])) == [text_key("kite")]
        # A namespace written again after a delete holds only the new chunks.
        index.add([chunk("new", vec(0, 0, 1), "user:a", text="fresh start")])
        assert ids_of(index.search(vec(1), 5, namespace="user:a")) == ["new"]
        assert keyword_ids(index, "kite fresh", "user:a") == ["new"]

    def test_embedding_cache_round_trips_per_identity_and_namespace(self, index: Index) -> None:
        small, big = embedder_identity("m", DIM), embedder_identity("m", 8)
        key, other = text_key("hello"), text_key("world")
        index.cache_embeddings(small, "n", {key: [0.5, -0.25, 0.0, 1.0]})
        index.cache_embeddings(big, "n", {key: [1.0] * 8})
        assert index.cached_embeddings(small, "n", [key, other]) == {key: [0.5, -0.25, 0.0, 1.0]}
        assert index.cached_embeddings(big, "n", [key]) == {key: [1.0] * 8}
        assert index.cached_embeddings(small, "m", [key]) == {}
        assert index.cached_embeddings(small, "n", []) == {}
        index.cache_embeddings(small, "n", {key: [0.1, 0.2, 0.3, 0.4]})  # replaced
        got = index.cached_embeddings(small, "n", [key])[key]
        assert got == pytest.approx([0.1, 0.2, 0.3, 0.4], abs=1e-6)
        many = {text_key(f"t{i}"): vec(1, i) for i in range(1200)}  # beyond any one IN (...) list
        index.cache_embeddings(small, "bulk", many)
        assert index.cached_embeddings(small, "bulk", list(many)) == many
        assert index.count() == 0  # the cache is not chunks

    def test_forget_cached_drops_those_texts_of_one_namespace(self, index: Index) -> None:
        forget = getattr(index, "forget_cached", None)
        if not callable(forget):
            pytest.skip(f"{type(index).__name__} has no forget_cached (an optional capability)")
        one, two = embedder_identity("model", DIM), embedder_identity("other", DIM)
        keys = [text_key("kite"), text_key("lake")]
        for ns in ("user:a", "user:a:b"):
            for ident in (one, two):
                index.cache_embeddings(ident, ns, {key: vec(1) for key in keys})
        forget("user:a", [text_key("kite"), text_key("never cached")])
        forget("user:a", [])
        for ident in (one, two):  # every identity's copy of that text goes
            assert list(index.cached_embeddings(ident, "user:a", keys)) == [text_key("lake")]
            assert sorted(index.cached_embeddings(ident, "user:a:b", keys)) == sorted(keys)

    def test_dimension_is_fixed_by_the_first_add(self, index: Index) -> None:
        index.add([chunk("a", vec(1), "n")])
        assert index.dimension == DIM
        with pytest.raises(DimensionMismatchError, match="dimension"):
            index.add([Chunk("b", "x", [1.0, 0.0], {"namespace": "n"})])
        with pytest.raises(DimensionMismatchError, match="dimension"):
            index.search([1.0, 0.0], 3, namespace="n")
        assert index.count() == 1

    def test_bad_input_is_refused(self, index: Index) -> None:
        with pytest.raises(ValueError, match="chunk 'a' has no vector"):
            index.add([Chunk("a", "no vector", None, {"namespace": "n"})])
        with pytest.raises(TypeError, match=r"metadata\['namespace'\] must be a str, got int"):
            index.add([Chunk("a", "x", vec(1), {"namespace": 3})])
        with pytest.raises(ValueError, match="top_k must be >= 0, got -1"):
            index.search(vec(1), -1, namespace="n")
        with pytest.raises(ValueError, match="namespace cannot be empty"):
            index.keyword_search("x", 3, namespace="")
        with pytest.raises(ValueError, match="namespace cannot be empty"):
            index.delete_namespace("")
        assert index.count() == 0

    # -- two objects on one storage (a restart, a second worker) ---------------

    # -- the optional search among the chunks of spans of time ----------------

    def _lists_recorded(self, index: Index) -> ListsRecorded:
        if not isinstance(index, ListsRecorded):
            pytest.skip(f"{type(index).__name__} has no search_recorded (an optional capability)")
        return index

    def test_search_recorded_ranks_one_namespaces_chunks_of_the_spans(self, index: Index) -> None:
        timed = self._lists_recorded(index)
        day = 86400.0
        for ns in NASTY_NAMESPACES:
            index.add([chunk(f"{ns}/{i}", vec(1, i / 10), ns, created_at=i * day) for i in range(10)])
        index.add([
            chunk("no time", vec(1), "user:a"), chunk("a word", vec(1), "user:a", created_at="3 days"),
            chunk("untagged", vec(1), None, created_at=3 * day),
        ])  # fmt: skip
        spans = [(2 * day, 4 * day), (8 * day, 8.5 * day)]  # days 2, 3 and 8
        for ns in NASTY_NAMESPACES:
            hits = timed.search_recorded(vec(1), 5, namespace=ns, spans=spans)
            assert ids_of(hits) == [f"{ns}/{i}" for i in (2, 3, 8)]
            assert hits[0].score > hits[1].score > hits[2].score
            assert hits[0].chunk.metadata == {"namespace": ns, "created_at": 2 * day}
        assert ids_of(timed.search_recorded(vec(1), 1, namespace="user:a", spans=spans)) == ["user:a/2"]
        assert ids_of(timed.search_recorded(vec(1), 9, namespace="default", spans=spans, include_untagged=True)) == ["untagged"]
        assert timed.search_recorded(vec(1), 5, namespace="user:a", spans=[]) == []
        assert timed.search_recorded(vec(1), 0, namespace="user:a", spans=spans) == []
        assert timed.search_recorded(vec(1), 5, namespace="nobody", spans=spans) == []

    def _lists_newest(self, index: Index) -> ListsNewest:
        if not isinstance(index, ListsNewest):
            pytest.skip(f"{type(index).__name__} has no newest() (an optional capability)")
        return index

    def test_newest_pages_one_namespace_newest_first(self, index: Index, open_index: Opener) -> None:
        lister = self._lists_newest(index)
        for ns in ("user:a", "user:a:b"):
            index.add([chunk(f"{ns}/{i}", vec(1, i), ns, created_at=float(t)) for i, t in enumerate((30, 10, 50, 20))])
        index.add([chunk("no time", vec(1), "user:a"), chunk("a word", vec(1), "user:a", created_at="3 days")])
        pages = [[c.id for c in lister.newest("user:a", 2, offset)] for offset in (0, 2, 4, 6)]
        assert pages[:2] == [["user:a/2", "user:a/0"], ["user:a/3", "user:a/1"]]
        assert sorted(pages[2]) == ["a word", "no time"] and pages[3] == []  # no time: last
        assert lister.newest("user:a", 3, 3)[0].id == "user:a/1"
        assert lister.newest("user:a", 1)[0].text == "text of user:a/2" and lister.newest("user:a", 0) == []
        assert [c.id for c in lister.newest("user:a:b", 9)] == [f"user:a:b/{i}" for i in (2, 0, 3, 1)]
        assert lister.newest("nobody", 5) == []
        index.delete(["user:a/2"])
        reader = open_index()  # another process sees the delete at once
        assert [c.id for c in reader.newest("user:a", 1)] == ["user:a/0"]  # type: ignore[attr-defined]
        assert [c.id for c in reader.newest("user:a:b", 1)] == ["user:a:b/2"]  # type: ignore[attr-defined]
        assert lister.namespace_counts() == {"user:a": 5, "user:a:b": 4}
        index.delete_namespace("user:a:b")
        assert lister.namespace_counts() == {"user:a": 5}
        for bad in ({"limit": -1}, {"offset": -1}):
            with pytest.raises(ValueError):
                lister.newest("user:a", **bad)

    def test_search_recorded_is_fresh_across_objects(self, index: Index, open_index: Opener) -> None:
        timed = self._lists_recorded(index)
        other = open_index()
        try:
            assert isinstance(other, ListsRecorded)
            index.add([chunk("a", vec(1), "n", created_at=10.0), chunk("b", vec(1, 1), "n", created_at=20.0)])
            assert ids_of(other.search_recorded(vec(1), 5, namespace="n", spans=[(0.0, 30.0)])) == ["a", "b"]
            other.add([chunk("c", vec(1, 0.1), "n", created_at=15.0)])
            index.delete(["a"])
            assert ids_of(timed.search_recorded(vec(1), 5, namespace="n", spans=[(0.0, 30.0)])) == ["c", "b"]
            index.add([chunk("b", vec(1, 1), "n", created_at=99.0)])  # said at another time
            assert ids_of(other.search_recorded(vec(1), 5, namespace="n", spans=[(0.0, 30.0)])) == ["c"]
        finally:
            other.close()

    def test_a_reopened_index_sees_everything(self, index: Index, open_index: Opener) -> None:
        ident = embedder_identity("m", DIM)
        index.add([chunk("a", vec(1, 0), "n", text="Jane lives in Lisbon", kind="message"),
                   chunk("b", vec(0, 1), "n", text="cats and dogs")])
        index.cache_embeddings(ident, "n", {text_key("Jane"): vec(0.5)})
        index.close()
        again = open_index()
        try:
            assert again.dimension == DIM
            assert ids_of(again.search(vec(1, 0.1), 5, namespace="n")) == ["a", "b"]
            assert keyword_ids(again, "Jane Lisbon", "n") == ["a"]
            assert again.ids("n") == {"a", "b"}
            assert again.get(["a"])[0].metadata == {"namespace": "n", "kind": "message"}
            assert again.cached_embeddings(ident, "n", [text_key("Jane")]) == {text_key("Jane"): vec(0.5)}
            with pytest.raises(DimensionMismatchError, match="dimension"):
                again.add([Chunk("c", "x", [1.0, 0.0], {"namespace": "n"})])
        finally:
            again.close()

    def test_two_live_objects_see_each_others_writes(self, index: Index, open_index: Opener) -> None:
        other: Index = open_index()
        try:
            index.add([chunk("a", vec(1), "n", text="alpha")])
            assert ids_of(other.search(vec(1), 5, namespace="n")) == ["a"]  # other now holds "n"
            index.add([chunk("b", vec(1, 0.5), "n", text="beta")])  # an append
            assert ids_of(other.search(vec(1), 5, namespace="n")) == ["a", "b"]
            index.add([chunk("a", vec(0, 0, 1), "n", text="alpha moved")])  # an update
            assert ids_of(other.search(vec(1), 5, namespace="n")) == ["b", "a"]
            index.delete(["b"])
            assert ids_of(other.search(vec(1), 5, namespace="n")) == ["a"]
            index.delete_namespace("n")
            assert other.search(vec(1), 5, namespace="n") == []
            index.add([chunk("z", vec(0, 1), "n", text="zeta")])  # the namespace again, anew
            assert ids_of(other.search(vec(1), 5, namespace="n")) == ["z"]
            other.add([chunk("y", vec(1), "n", text="ypsilon")])
            assert ids_of(index.search(vec(1), 5, namespace="n")) == ["y", "z"]
            assert keyword_ids(index, "ypsilon", "n") == ["y"]
        finally:
            other.close()

    def test_fresh_after_each_write_in_one_object(self, index: Index) -> None:
        for i in range(20):
            index.add([chunk(f"m{i}", vec(1, i), "n", text=f"message {i}")])
            assert ids_of(index.search(vec(1, i), 1, namespace="n")) == [f"m{i}"]
            assert index.count("n") == i + 1
        index.delete([f"m{i}" for i in range(0, 20, 2)])
        assert sorted(ids_of(index.search(vec(1), 20, namespace="n"))) == sorted(f"m{i}" for i in range(1, 20, 2))

    def test_concurrent_adds_and_searches(self, index: Index) -> None:
        errors: list[BaseException] = []

        def worker(n: int) -> None:
            try:
                for i in range(15):
                    index.add([chunk(f"w{n}-{i}", vec(1, n, i), f"user{n}", text=f"note {i}")])
                    hits = index.search(vec(1, n, i), 3, namespace=f"user{n}")
                    assert all(h.chunk.metadata["namespace"] == f"user{n}" for h in hits)
                    assert f"w{n}-{i}" in index.ids(f"user{n}")
            except BaseException as exc:  # collected and re-raised in the main thread
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert index.count() == 60
        assert all(index.count(f"user{n}") == 15 for n in range(4))
