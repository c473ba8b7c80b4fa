"""FastAIAgentStore does every BaseStore operation LangGraph's docs describe, on
each backend: put / get / delete, search by prefix, filter (each operator) and
meaning, list_namespaces (prefix, suffix, wildcards, depth, paging), batch,
the async twins, TTL, and isolation between projects."""

from __future__ import annotations

import asyncio
import hashlib
import math
from typing import Any

import pytest

from _env import require_module
from _wait import wait_until

require_module("langgraph.store.base")

from langgraph.store.base import (  # noqa: E402
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    PutOp,
    SearchOp,
)

from fastaiagent.errors import InvalidValueError  # noqa: E402
from fastaiagent.integrations.langgraph import FastAIAgentStore  # noqa: E402


class WordEmbedder:
    """Deterministic bag-of-words embedder (fastaiagent's Embedder protocol):
    texts that share words point the same way."""

    dimension = 64

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        out = []
        for text in texts:
            vector = [0.0] * self.dimension
            for word in text.lower().replace(",", " ").split():
                vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimension] += 1.0
            out.append(vector)
        return out


@pytest.fixture
def store(fact_store: Any) -> FastAIAgentStore:
    return FastAIAgentStore(fact_store, index={"embed": WordEmbedder(), "fields": ["text"]})


def test_put_get_update_delete(store: FastAIAgentStore) -> None:
    assert store.get(("users", "alice"), "prefs") is None
    store.put(("users", "alice"), "prefs", {"theme": "dark", "n": 1})
    item = store.get(("users", "alice"), "prefs")
    assert item is not None and item.value == {"theme": "dark", "n": 1}
    assert item.namespace == ("users", "alice") and item.key == "prefs"
    store.put(("users", "alice"), "prefs", {"theme": "light"})
    updated = store.get(("users", "alice"), "prefs")
    assert updated is not None and updated.value == {"theme": "light"}
    assert updated.created_at == item.created_at and updated.updated_at >= item.updated_at
    store.delete(("users", "alice"), "prefs")
    assert store.get(("users", "alice"), "prefs") is None


def test_search_by_prefix_pages_in_order(store: FastAIAgentStore) -> None:
    for i in range(5):
        store.put(("docs", "a"), f"k{i}", {"i": i})
    store.put(("docs", "b"), "k0", {"i": 10})
    store.put(("other",), "k0", {"i": 99})
    assert [r.value["i"] for r in store.search(("docs",), limit=10)] == [0, 1, 2, 3, 4, 10]
    assert [r.value["i"] for r in store.search(("docs",), limit=2, offset=1)] == [1, 2]
    assert [r.namespace for r in store.search(("docs", "b"))] == [("docs", "b")]
    assert len(store.search((), limit=100)) == 7


def test_search_filters_with_every_operator(store: FastAIAgentStore) -> None:
    rows = [
        {"kind": "fruit", "price": 1, "meta": {"colour": "red"}},
        {"kind": "fruit", "price": 3, "meta": {"colour": "green"}},
        {"kind": "veg", "price": 2, "meta": {"colour": "green"}},
    ]
    for i, row in enumerate(rows):
        store.put(("food",), f"k{i}", row)

    def keys(flt: dict[str, Any]) -> list[str]:
        return [r.key for r in store.search(("food",), filter=flt)]

    assert keys({"kind": "fruit"}) == ["k0", "k1"]
    assert keys({"kind": {"$eq": "veg"}}) == ["k2"]
    assert keys({"kind": {"$ne": "veg"}}) == ["k0", "k1"]
    assert keys({"price": {"$gt": 1}}) == ["k1", "k2"]
    assert keys({"price": {"$gte": 2, "$lt": 3}}) == ["k2"]
    assert keys({"price": {"$lte": 1}}) == ["k0"]
    assert keys({"meta": {"colour": "green"}, "kind": "fruit"}) == ["k1"]
    assert keys({"missing": {"$gt": 0}}) == []
    assert [r.key for r in store.search(("food",), filter={"kind": "fruit"}, limit=1, offset=1)] == ["k1"]
    with pytest.raises(InvalidValueError, match="unknown filter operator"):
        store.search(("food",), filter={"price": {"$near": 1}})


def test_search_by_meaning_ranks_and_respects_index_choices(store: FastAIAgentStore) -> None:
    store.put(("mem", "u1"), "a", {"text": "likes green tea in the morning"})
    store.put(("mem", "u1"), "b", {"text": "works as a pilot for an airline"})
    store.put(("mem", "u1"), "c", {"text": "plays chess", "note": "pilot airline"}, index=["note"])
    store.put(("mem", "u1"), "d", {"text": "pilot airline"}, index=False)
    found = store.search(("mem",), query="airline pilot", limit=3)
    assert [r.key for r in found[:2]] == ["b", "c"] or [r.key for r in found[:2]] == ["c", "b"]
    assert found[0].score is not None and found[0].score > 0.5
    assert all(r.score is None for r in store.search(("mem",), query="airline pilot", limit=10) if r.key == "d")
    tea = store.search(("mem",), query="green tea", filter={"text": {"$ne": "x"}}, limit=1)
    assert [r.key for r in tea] == ["a"]
    assert math.isclose(tea[0].score or 0, tea[0].score or 0)


def test_index_without_an_embedder_is_refused() -> None:
    with pytest.raises(InvalidValueError, match='index needs "embed"'):
        FastAIAgentStore("sqlite", index={"fields": ["text"]})  # type: ignore[typeddict-item]


def test_list_namespaces_matches_prefix_suffix_wildcards_depth(store: FastAIAgentStore) -> None:
    for ns in [("a", "x", "v1"), ("a", "y", "v1"), ("a", "y", "v2"), ("b", "x", "v1"), ("a",)]:
        store.put(ns, "k", {"n": 1})
    assert store.list_namespaces() == [("a",), ("a", "x", "v1"), ("a", "y", "v1"), ("a", "y", "v2"), ("b", "x", "v1")]
    assert store.list_namespaces(prefix=("a", "y")) == [("a", "y", "v1"), ("a", "y", "v2")]
    assert store.list_namespaces(suffix=("v1",)) == [("a", "x", "v1"), ("a", "y", "v1"), ("b", "x", "v1")]
    assert store.list_namespaces(prefix=("*", "x")) == [("a", "x", "v1"), ("b", "x", "v1")]
    assert store.list_namespaces(prefix=("a",), suffix=("*", "v2")) == [("a", "y", "v2")]
    assert store.list_namespaces(max_depth=2) == [("a",), ("a", "x"), ("a", "y"), ("b", "x")]
    assert store.list_namespaces(limit=2, offset=1) == [("a", "x", "v1"), ("a", "y", "v1")]
    store.delete(("a",), "k")
    assert ("a",) not in store.list_namespaces()


def test_batch_runs_ops_in_order(store: FastAIAgentStore) -> None:
    results = store.batch(
        [
            PutOp(("b",), "k1", {"v": 1}),
            PutOp(("b",), "k2", {"v": 2}),
            GetOp(("b",), "k1"),
            SearchOp(("b",), filter={"v": 2}),
            PutOp(("b",), "k1", None),
            GetOp(("b",), "k1"),
            ListNamespacesOp(),
        ]
    )
    assert results[0] is None and results[1] is None
    assert results[2].value == {"v": 1}  # type: ignore[union-attr]
    assert [r.key for r in results[3]] == ["k2"]  # type: ignore[union-attr]
    assert results[5] is None
    assert results[6] == [("b",)]


def test_async_twins(store: FastAIAgentStore) -> None:
    async def run() -> None:
        await store.aput(("as",), "k", {"text": "airline pilot"})
        item = await store.aget(("as",), "k")
        assert item is not None and item.value == {"text": "airline pilot"}
        assert [r.key for r in await store.asearch(("as",), query="pilot")] == ["k"]
        assert await store.alist_namespaces(prefix=("as",)) == [("as",)]
        results = await store.abatch([GetOp(("as",), "k"), SearchOp(("as",))])
        assert results[0].key == "k"  # type: ignore[union-attr]
        await store.adelete(("as",), "k")
        assert await store.aget(("as",), "k") is None

    asyncio.run(run())


def test_ttl_expires_and_reads_refresh(fact_store: Any) -> None:
    store = FastAIAgentStore(fact_store, ttl={"default_ttl": 0.002, "refresh_on_read": True})
    store.put(("t",), "short", {"v": 1})  # default_ttl: 0.12 s
    store.put(("t",), "long", {"v": 2}, ttl=10)
    store.put(("t",), "never", {"v": 3}, ttl=None)
    wait_until(lambda: store.get(("t",), "short", refresh_ttl=False) is None, "the short item to expire")
    assert [r.key for r in store.search(("t",))] == ["long", "never"]
    before = store.items.get((*store._root, "t"), ["long"])[0]
    store.get(("t",), "long")  # refresh_on_read restarts the clock
    after = store.items.get((*store._root, "t"), ["long"])[0]
    assert before is not None and after is not None and after.expires_at >= before.expires_at  # type: ignore[operator]
    assert store.sweep() >= 0


def test_projects_are_isolated_and_items_survive_a_new_store(fact_store: Any) -> None:
    one = FastAIAgentStore(fact_store, project_id="one")
    two = FastAIAgentStore(fact_store, project_id="two")
    one.put(("users", "alice"), "k", {"v": 1})
    assert two.get(("users", "alice"), "k") is None
    assert two.search(()) == [] and two.list_namespaces() == []
    again = FastAIAgentStore(fact_store, project_id="one")
    assert again.get(("users", "alice"), "k").value == {"v": 1}  # type: ignore[union-attr]


def test_namespaces_langgraph_rejects_are_rejected(store: FastAIAgentStore) -> None:
    with pytest.raises(InvalidNamespaceError, match="periods"):
        store.put(("a.b",), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError, match="empty"):
        store.put((), "k", {"v": 1})


def test_search_by_meaning_with_the_librarys_local_embedder(tmp_path: Any) -> None:
    require_module("onnxruntime")  # the [local] extra: the offline model runs on it
    store = FastAIAgentStore(f"sqlite:///{tmp_path}/m.db", index={"embed": "local", "fields": ["text"]})
    store.put(("mem", "bob"), "job", {"text": "Bob flies planes for a living"})
    store.put(("mem", "bob"), "food", {"text": "Bob is vegetarian and loves curry"})
    store.put(("mem", "bob"), "pet", {"text": "Bob has a grey cat called Mist"})
    found = store.search(("mem", "bob"), query="what is his occupation?", limit=3)
    assert found[0].key == "job", [(r.key, r.score) for r in found]
    assert store.search(("mem", "bob"), query="what does he eat", limit=1)[0].key == "food"


def test_search_ranks_through_the_recall_pipeline(store: FastAIAgentStore) -> None:
    # Equal by meaning: the recall pipeline's cue ("currently" / "originally") picks the
    # item written later / earlier; the score stays the cosine similarity.
    store.put(("prefs", "u1"), "old", {"text": "favourite editor is vim"})
    store.put(("prefs", "u1"), "new", {"text": "favourite editor is emacs"})
    now = store.search(("prefs",), query="which editor is currently the favourite", limit=2)
    first = store.search(("prefs",), query="which editor was originally the favourite", limit=2)
    assert [r.key for r in now] == ["new", "old"]
    assert [r.key for r in first] == ["old", "new"]
    assert now[0].score is not None and 0.0 < now[0].score <= 1.0
    assert math.isclose(now[0].score, now[1].score or 0.0)  # a tie by meaning
