"""RedisVectorIndex (RedisFactStore.vector_store()) on the real Redis.

What a user relies on: vectors, keyword postings and cached embeddings outlive
the process and are shared by every process on the prefix; a process's
cached matrix catches up with other processes' writes before it ranks;
forgetting a namespace leaves none of its vectors, postings or embeddings in
Redis (read from the raw keys); a newer layout is refused; outages are
StoreUnavailableError.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from _env import require_module
from fastaiagent.errors import SchemaVersionError, StoreUnavailableError
from fastaiagent.facts.vectors import HoldsVectors, StoredVectorIndex, text_key
from fastaiagent.kb.protocols import Chunk, DimensionMismatchError

pytestmark = pytest.mark.redis
redis = require_module("redis")  # a missing driver fails under CI=true

from fastaiagent.facts.redis.store import RedisFactStore, escape_part  # noqa: E402
from fastaiagent.facts.redis.vectors import VECTORS_LAYOUT, RedisVectorIndex  # noqa: E402

NS = "user:alice"


def _chunk(chunk_id: str, text: str, vector: list[float], namespace: str = NS) -> Chunk:
    return Chunk(chunk_id, text, vector, {"namespace": namespace})


@pytest.fixture
def store(redis_url: str, redis_prefix: str) -> Iterator[RedisFactStore]:
    opened = RedisFactStore(redis_url, prefix=redis_prefix)
    yield opened
    opened.close()


@pytest.fixture
def raw(redis_url: str) -> Iterator[Any]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def _keys(raw: Any, prefix: str) -> set[str]:
    return set(raw.scan_iter(match=prefix + ":vec:*", count=1000))


_OPENED: list[RedisFactStore] = []


@pytest.fixture(autouse=True)
def _close_other_processes() -> Iterator[None]:
    yield
    while _OPENED:
        _OPENED.pop().close()


def _other_process(redis_url: str, redis_prefix: str) -> RedisVectorIndex:
    """An index as another process (or a restart) opens it: its own store and client."""
    _OPENED.append(RedisFactStore(redis_url, prefix=redis_prefix))
    index = _OPENED[-1].vector_store()
    assert isinstance(index, RedisVectorIndex)
    return index


def test_the_store_holds_vectors_and_the_index_meets_the_contract(store: RedisFactStore) -> None:
    assert isinstance(store, HoldsVectors)
    assert isinstance(store.vector_store(), StoredVectorIndex)


def test_search_ranks_one_namespace_by_cosine_and_never_another(store: RedisFactStore) -> None:
    index = store.vector_store()
    index.add(
        [
            _chunk("a", "tea in the morning", [1.0, 0.0, 0.0]),
            _chunk("b", "coffee at night", [0.6, 0.8, 0.0]),
            _chunk("c", "bob's note", [1.0, 0.0, 0.0], namespace="user:bob"),
        ]
    )
    hits = index.search([2.0, 0.0, 0.0], 5, namespace=NS)
    assert [(h.chunk.id, round(h.score, 4)) for h in hits] == [("a", 1.0), ("b", 0.6)]
    assert hits[0].chunk.text == "tea in the morning"
    assert hits[0].chunk.metadata == {"namespace": NS}
    assert [h.chunk.id for h in index.search([1.0, 0.0, 0.0], 1, namespace=NS)] == ["a"]
    assert {h.chunk.id for h in index.search([1.0, 0.0, 0.0], 5)} == {"a", "b", "c"}
    assert index.ids(NS) == {"a", "b"} and index.count() == 3 and index.count(NS) == 2


def test_everything_outlives_the_process_and_is_shared(
    store: RedisFactStore, redis_url: str, redis_prefix: str
) -> None:
    first = store.vector_store()
    first.add([_chunk("a", "the green kayak trip", [0.0, 1.0])])
    first.cache_embeddings("model@2", NS, {text_key("hello"): [0.5, 0.25]})
    first.close()
    later = _other_process(redis_url, redis_prefix)
    assert later.dimension == 2
    assert [h.chunk.id for h in later.search([0.0, 1.0], 3, namespace=NS)] == ["a"]
    assert [i for i, _ in later.keyword_search("kayaks", 3, namespace=NS)] == ["a"]
    assert later.get(["a", "missing"]) == [
        Chunk("a", "the green kayak trip", None, {"namespace": NS})
    ]
    assert later.cached_embeddings("model@2", NS, [text_key("hello"), "nope"]) == {
        text_key("hello"): [0.5, 0.25]
    }


def test_a_warm_process_sees_other_processes_writes_before_ranking(
    store: RedisFactStore, redis_url: str, redis_prefix: str
) -> None:
    warm = store.vector_store()
    warm.add([_chunk("a", "one", [1.0, 0.0]), _chunk("b", "two", [0.0, 1.0])])
    assert [h.chunk.id for h in warm.search([1.0, 0.0], 1, namespace=NS)] == ["a"]
    other = _other_process(redis_url, redis_prefix)
    other.add([_chunk("b", "two, moved", [1.0, 0.1]), _chunk("c", "three", [0.9, 0.0])])
    other.delete(["a"])
    assert [h.chunk.id for h in warm.search([1.0, 0.0], 3, namespace=NS)] == ["c", "b"]
    other.delete_namespace(NS)  # drops the change log: the warm cache reloads
    other.add([_chunk("d", "four", [1.0, 0.0])])
    assert [h.chunk.id for h in warm.search([1.0, 0.0], 3, namespace=NS)] == ["d"]


def test_a_cold_read_in_steps_holds_every_chunk_once_with_its_vector(
    store: RedisFactStore, redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastaiagent.facts.redis import vectors as redis_vectors

    monkeypatch.setattr(redis_vectors, "SCAN_STEP", 7)  # 60 chunks: several steps
    angles = [i / 60 for i in range(60)]
    store.vector_store().add([_chunk(f"c{i}", f"chunk {i}", [1.0, a]) for i, a in enumerate(angles)])
    cold = _other_process(redis_url, redis_prefix)
    for i in (0, 31, 59):
        assert cold.search([1.0, angles[i]], 1, namespace=NS)[0].chunk.id == f"c{i}"
    held = cold.copies.held(cold._name(cold._ns(NS)))
    assert held is not None and sorted(held.keys) == sorted(f"c{i}" for i in range(60))
    # More rows than HLEN said (written between the two): the matrix grows
    ids, matrix = cold._scan_vectors(cold._k("v:", cold._ns(NS)), 5, 2)
    assert sorted(ids) == sorted(held.keys) and matrix.shape == (60, 2)


def test_an_older_layout_s_cjk_messages_are_indexed_again_as_character_pairs(
    store: RedisFactStore, redis_url: str, redis_prefix: str, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastaiagent.facts.redis import vectors as redis_vectors

    # Written as layout 2 wrote it: a clause of Chinese is one token
    monkeypatch.setattr(redis_vectors, "keyword_tokens", lambda chunk: chunk.text.casefold().split())
    old = store.vector_store()
    old.add([
        _chunk("zh", "伴娘请了我室友", [1.0, 0.0]),
        _chunk("en", "the bridesmaid came", [0.0, 1.0]),
        _chunk("other", "伴娘是谁", [0.5, 0.5], namespace="user:bob"),
    ])  # fmt: skip
    assert old.keyword_search("伴娘", 3, namespace=NS) == []
    monkeypatch.undo()
    raw.set(f"{redis_prefix}:vec:layout", "2")
    later = _other_process(redis_url, redis_prefix)
    assert [i for i, _ in later.keyword_search("伴娘", 3, namespace=NS)] == ["zh"]
    assert raw.get(f"{redis_prefix}:vec:layout") == VECTORS_LAYOUT
    assert later.search([1.0, 0.0], 1, namespace=NS)[0].chunk.id == "zh"  # its own vector
    assert [i for i, _ in later.keyword_search("bridesmaid", 3, namespace=NS)] == ["en"]
    assert [i for i, _ in later.keyword_search("伴娘", 3, namespace="user:bob")] == ["other"]


def test_a_layout_3_index_is_stemmed_again_and_unchanged_chunks_stay(
    store: RedisFactStore, redis_url: str, redis_prefix: str, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastaiagent.facts.redis import vectors as redis_vectors

    monkeypatch.setattr(redis_vectors, "keyword_tokens", lambda chunk: chunk.text.casefold().split())  # unstemmed
    old = store.vector_store()
    old.add([_chunk("moved", "we moved to uv", [1.0, 0.0]), _chunk("plain", "tomato balcony", [0.0, 1.0])])
    assert old.keyword_search("moving", 3, namespace=NS) == []
    monkeypatch.undo()
    raw.set(f"{redis_prefix}:vec:layout", "3")
    log = f"{redis_prefix}:vec:log:{escape_part(NS)}"
    changed = {chunk: raw.zscore(log, chunk) for chunk in ("moved", "plain")}
    later = _other_process(redis_url, redis_prefix)
    assert [i for i, _ in later.keyword_search("moving", 3, namespace=NS)] == ["moved"]
    assert raw.get(f"{redis_prefix}:vec:layout") == VECTORS_LAYOUT
    # Only the chunk whose terms change is written again: "tomato balcony" stems as it was
    assert raw.zscore(log, "plain") == changed["plain"] and raw.zscore(log, "moved") > changed["moved"]
    assert later.search([1.0, 0.0], 1, namespace=NS)[0].chunk.id == "moved"  # its own vector


def test_a_repeated_id_of_a_rehashing_scan_is_kept_once() -> None:
    import numpy as np

    from fastaiagent.facts.redis.vectors import _first_of_each

    ids, matrix = _first_of_each(["a", "b", "a", "c"], np.arange(8, dtype=np.float32).reshape(4, 2))
    assert ids == ["a", "b", "c"] and matrix.tolist() == [[0, 1], [2, 3], [6, 7]]


def test_keyword_search_scores_bm25_within_the_namespace(store: RedisFactStore) -> None:
    index = store.vector_store()
    index.add(
        [
            _chunk("a", "Alice booked a flight to Lisbon", [1.0, 0.0]),
            _chunk("b", "Alice likes flights and more flights", [1.0, 0.0]),
            _chunk("c", "The weather in Porto", [1.0, 0.0]),
            _chunk("x", "Lisbon Lisbon Lisbon", [1.0, 0.0], namespace="user:bob"),
        ]
    )
    found = index.keyword_search("flights to Lisbon", 5, namespace=NS)
    assert [i for i, _ in found] == ["a", "b"]  # a matches both terms; b one, twice
    assert found[0][1] > found[1][1] > 0
    assert [i for i, _ in index.keyword_search("lisbon", 5, namespace="user:bob")] == ["x"]
    assert index.keyword_search("the and of", 5, namespace=NS) == []  # stop words only
    assert index.keyword_search("lisbon", 1, namespace="user:nobody") == []


def test_replacing_or_deleting_a_chunk_updates_its_postings(
    store: RedisFactStore, raw: Any, redis_prefix: str
) -> None:
    index = store.vector_store()
    index.add([_chunk("a", "red kayak", [1.0, 0.0])])
    index.add([_chunk("a", "blue canoe", [1.0, 0.0])])
    assert index.keyword_search("kayak", 5, namespace=NS) == []
    assert [i for i, _ in index.keyword_search("canoe", 5, namespace=NS)] == ["a"]
    assert not any(k.endswith(":kayak") for k in _keys(raw, redis_prefix))
    assert index.delete(["a", "a", "missing"]) == 1
    assert index.keyword_search("canoe", 5, namespace=NS) == []
    assert index.search([1.0, 0.0], 5, namespace=NS) == []
    assert not any(k.endswith(":canoe") for k in _keys(raw, redis_prefix))


def test_a_chunk_moved_to_another_namespace_leaves_the_first(store: RedisFactStore) -> None:
    index = store.vector_store()
    index.add([_chunk("a", "kayak", [1.0, 0.0])])
    index.add([_chunk("a", "kayak", [1.0, 0.0], namespace="user:bob")])
    assert index.search([1.0, 0.0], 5, namespace=NS) == []
    assert index.keyword_search("kayak", 5, namespace=NS) == []
    assert [h.chunk.id for h in index.search([1.0, 0.0], 5, namespace="user:bob")] == ["a"]
    assert index.count() == 1


def test_embeddings_are_cached_per_embedder_and_namespace(store: RedisFactStore) -> None:
    index = store.vector_store()
    key = text_key("hello")
    index.cache_embeddings("small@2", NS, {key: [1.0, 2.0]})
    assert index.cached_embeddings("small@2", NS, [key]) == {key: [1.0, 2.0]}
    assert index.cached_embeddings("large@3", NS, [key]) == {}
    assert index.cached_embeddings("small@2", "user:bob", [key]) == {}


def test_forgetting_a_namespace_leaves_nothing_of_it_in_redis(
    store: RedisFactStore, raw: Any, redis_prefix: str
) -> None:
    index = store.vector_store()
    index.add(
        [_chunk(f"c{n}", f"note number {n} about kayaks", [1.0, float(n)]) for n in range(1200)]
    )
    index.add([_chunk("b", "bob's kayak", [1.0, 0.0], namespace="user:bob")])
    index.cache_embeddings("m@2", NS, {text_key("x"): [1.0, 0.0]})
    assert index.delete_namespace(NS) == 1200  # in several atomic steps
    assert {k for k in _keys(raw, redis_prefix) if "alice" in k} == set()  # no key names her
    assert index.search([1.0, 0.0], 5, namespace=NS) == []
    assert index.cached_embeddings("m@2", NS, [text_key("x")]) == {}
    assert [h.chunk.id for h in index.search([1.0, 0.0], 5, namespace="user:bob")] == ["b"]
    assert index.delete_namespace(NS) == 0


def test_a_copy_of_a_deleted_namespace_is_not_served_after_it_is_written_again(
    store: RedisFactStore, redis_prefix: str, redis_url: str
) -> None:
    # The namespace's meta key goes with it; versions come from the prefix's counter,
    # so the other process's copy (at the old version) reloads instead of serving it.
    index = store.vector_store()
    index.add([_chunk("old", "old words", [1.0, 0.0])])
    other = _other_process(redis_url, redis_prefix)
    assert [h.chunk.id for h in other.search([1.0, 0.0], 5, namespace=NS)] == ["old"]
    index.delete_namespace(NS)
    index.add([_chunk("new", "new words", [0.0, 1.0])])
    assert [h.chunk.id for h in other.search([1.0, 0.0], 5, namespace=NS)] == ["new"]


def test_the_change_log_stays_bounded_under_churn(
    store: RedisFactStore, raw: Any, redis_prefix: str, redis_url: str
) -> None:
    warm = store.vector_store()
    warm.add([_chunk("keep", "k", [0.0, 1.0])])
    warm.search([0.0, 1.0], 1, namespace=NS)  # a cache older than the compaction below
    other = _other_process(redis_url, redis_prefix)
    for n in range(3):
        other.add([_chunk(f"t{i}", "t", [1.0, 0.0]) for i in range(500 * n, 500 * n + 500)])
        other.delete([f"t{i}" for i in range(500 * n, 500 * n + 500)])
    assert raw.zcard(f"{redis_prefix}:vec:log:user%3Aalice") <= 1002
    assert [h.chunk.id for h in warm.search([1.0, 0.0], 5, namespace=NS)] == ["keep"]


def test_another_dimension_is_refused_even_from_another_process(
    store: RedisFactStore, redis_url: str, redis_prefix: str
) -> None:
    store.vector_store().add([_chunk("a", "x", [1.0, 0.0])])
    with pytest.raises(DimensionMismatchError, match=r"dimension 3 .* dimension 2"):
        _other_process(redis_url, redis_prefix).add([_chunk("b", "y", [1.0, 0.0, 0.0])])
    with pytest.raises(
        DimensionMismatchError, match="has dimension 3 but the index has dimension 2"
    ):
        store.vector_store().search([1.0, 0.0, 0.0], 1, namespace=NS)


def test_a_newer_layout_is_refused(store: RedisFactStore, raw: Any, redis_prefix: str) -> None:
    raw.set(f"{redis_prefix}:vec:layout", str(int(VECTORS_LAYOUT) + 1))
    with pytest.raises(SchemaVersionError, match="pip install -U fastaiagent"):
        store.vector_store().add([_chunk("a", "x", [1.0, 0.0])])


def test_a_layout_1_index_gains_the_chunks_times(store: RedisFactStore, raw: Any, redis_prefix: str) -> None:
    index = store.vector_store()
    index.add([
        Chunk("a", "early", [1.0, 0.0], {"namespace": NS, "created_at": 50.25}),
        Chunk("b", "late", [1.0, 0.1], {"namespace": NS, "created_at": 500.0}),
        Chunk("c", "a word", [1.0, 0.2], {"namespace": NS, "created_at": "yesterday"}),
        Chunk("d", "other user", [1.0, 0.0], {"namespace": "user:2", "created_at": 60.0}),
    ])  # fmt: skip
    for key in raw.scan_iter(match=f"{redis_prefix}:vec:rt:*"):  # back to layout 1
        raw.delete(key)
    raw.set(f"{redis_prefix}:vec:layout", "1")
    reopened = RedisFactStore(store.url, prefix=redis_prefix).vector_store()
    hits = reopened.search_recorded([1.0, 0.0], 5, namespace=NS, spans=[(0.0, 1000.0)])
    assert [hit.chunk.id for hit in hits] == ["a", "b"]  # "c" has no numeric time
    assert raw.zscore(f"{redis_prefix}:vec:rt:{escape_part(NS)}", "a") == 50.25
    assert raw.get(f"{redis_prefix}:vec:layout") == VECTORS_LAYOUT == "4"
    other = reopened.search_recorded([1.0, 0.0], 5, namespace="user:2", spans=[(0.0, 100.0)])
    assert [hit.chunk.id for hit in other] == ["d"]


def test_searches_survive_a_flushed_script_cache(own_redis_url: str, redis_prefix: str) -> None:
    # SCRIPT FLUSH empties the whole server's cache: only on a server of the test's own.
    store = RedisFactStore(own_redis_url, prefix=redis_prefix)
    raw = redis.Redis.from_url(own_redis_url)
    index = store.vector_store()
    index.add([_chunk("a", "x", [1.0, 0.0])])
    index.search([1.0, 0.0], 1, namespace=NS)  # warm: the next search runs the delta script
    raw.script_flush()
    index.add([_chunk("b", "y", [0.9, 0.1])])
    raw.script_flush()
    assert [h.chunk.id for h in index.search([1.0, 0.0], 2, namespace=NS)] == ["a", "b"]
    store.close()
    raw.close()


def test_an_unreachable_server_is_store_unavailable() -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    store = RedisFactStore(f"redis://127.0.0.1:{port}/0", prefix="gone", socket_timeout=0.5)
    try:
        with pytest.raises(StoreUnavailableError, match="cannot reach Redis for the vector index"):
            store.vector_store().search([1.0], 1, namespace=NS)
    finally:
        store.close()
