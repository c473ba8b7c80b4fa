"""A long-running process keeps what it caches within its budget (issue #45): the
namespace copies of every vector index together stay within
``matrix.CACHE_BYTES`` however many namespaces pass through, an index dropped
unclosed leaves nothing behind, and a thread that has ended gives its SQLite
connection back (docs/production.md, "What a process keeps")."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from fastaiagent import Memory
from fastaiagent.facts.index import matrix
from fastaiagent.facts.index.matrix import Change, NamespaceCopies, shared_held
from fastaiagent.facts.sqlite.store import SQLiteFactStore
from fastaiagent.kb.protocols import Chunk

DIMENSION = 384


def unit(seed: int) -> list[float]:
    vector = np.random.default_rng(seed).standard_normal(DIMENSION)
    return (vector / np.linalg.norm(vector)).tolist()


def test_the_copies_of_every_index_stay_within_the_process_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    budget = 256 * 1024
    monkeypatch.setattr(matrix, "CACHE_BYTES", budget)
    # Two stores (two indexes) share one budget: 2 x 1,000 namespaces of 3 chunks each.
    indexes = [SQLiteFactStore(tmp_path / f"{n}.db").vector_store() for n in range(2)]
    for n, index in enumerate(indexes):
        index.add([
            Chunk(f"{n}-{u}-{i}", f"message {i} of user {u}", unit(n * 10_000 + u * 3 + i), {"namespace": f"user:{u}"})
            for u in range(1_000) for i in range(3)
        ])  # fmt: skip
    peak = 0
    for u in range(1_000):
        for n, index in enumerate(indexes):
            hits = index.search(unit(n * 10_000 + u * 3 + 1), 1, namespace=f"user:{u}")
            assert [hit.chunk.id for hit in hits] == [f"{n}-{u}-1"]  # found, whatever was evicted
            peak = max(peak, shared_held()[1])
    assert peak <= budget
    copies, held = shared_held()
    assert held <= budget and 5 <= copies < 2_000  # a 3-row namespace is charged for its rows
    assert "user:999" in indexes[0].copies and "user:0" not in indexes[0].copies  # least recent out


def test_an_index_with_a_budget_of_its_own_keeps_it_out_of_the_shared_one(tmp_path: Path) -> None:
    gc.collect()
    before = shared_held()
    own = SQLiteFactStore(tmp_path / "own.db")
    from fastaiagent.facts.sqlite.vectors import SQLiteVectorIndex

    index = SQLiteVectorIndex(own, cache_bytes=10**6)
    index.add([Chunk("a", "hello there", unit(1), {"namespace": "user:a"})])
    assert index.search(unit(1), 1, namespace="user:a")[0].chunk.id == "a"
    assert "user:a" in index.copies and shared_held() == before


def test_an_index_dropped_without_close_leaves_nothing_in_the_shared_cache(tmp_path: Path) -> None:
    def search_once() -> None:
        index = SQLiteFactStore(tmp_path / "dropped.db").vector_store()
        index.add([Chunk("a", "hello there", unit(2), {"namespace": "user:a"})])
        index.search(unit(2), 1, namespace="user:a")
        assert shared_held()[0] == before + 1

    gc.collect()
    before = shared_held()[0]
    search_once()
    gc.collect()
    assert shared_held()[0] == before


def test_an_index_collected_while_its_thread_holds_the_cache_lock_does_not_hang() -> None:
    """The collector may finalise an index inside any allocation, also one made under
    the shared cache's lock (a CI run hung there once): its copies go when the lock
    is free again, never by waiting for it."""

    def held_once() -> None:
        copies = NamespaceCopies(None)
        copies.cycle = copies  # type: ignore[attr-defined]  # freed by a collection, not on return
        copies.settle("user:a", Change(1, keys=["a"], vectors=np.ones((1, 4), dtype=np.float32) / 2))
        assert shared_held()[0] == before + 1

    gc.collect()
    before = shared_held()[0]
    held_once()  # its NamespaceCopies is garbage now, kept by a cycle until a collection
    with matrix.SHARED.lock:
        gc.collect()  # finalises it here, the lock held by this thread: must not wait
    NamespaceCopies(None)  # the next index made drops what the collected one held
    assert shared_held()[0] == before


def test_the_namespaces_too_big_to_hold_are_remembered_within_a_bound() -> None:
    copies = NamespaceCopies(1)  # nothing fits
    vectors = np.ones((1, 4), dtype=np.float32) / 2
    for n in range(2 * matrix.TOO_BIG_HELD + 5):
        view = copies.settle(f"user:{n}", Change(1, keys=["a"], vectors=vectors.copy()))
        assert view is not None and len(view.vectors) == 1  # searched from the read all the same
    assert 0 < len(copies.too_big) <= matrix.TOO_BIG_HELD


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts the open files in /proc")
def test_a_thread_that_ended_gives_its_sqlite_connection_back(tmp_path: Path) -> None:
    memory = Memory(f"sqlite:///{tmp_path}/threads.db")
    memory.persist("Likes green tea", id="alice")

    def read() -> None:
        assert [fact.fact for fact in memory.retrieve(id="alice")] == ["Likes green tea"]

    read()
    opened = len(os.listdir("/proc/self/fd"))
    for _ in range(200):  # a server that starts a thread per request
        thread = threading.Thread(target=read)
        thread.start()
        thread.join()
    assert len(os.listdir("/proc/self/fd")) <= opened + 4  # was 2-3 files more per thread
    memory.persist("Likes black coffee", id="alice")  # the store still reads and writes
    assert len(memory.retrieve(id="alice")) == 2


def test_the_entity_books_a_store_keeps_stay_within_their_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastaiagent.facts import entities
    from fastaiagent.recall.entity_store import add_with_entities, entity_candidates

    budget = 64 * 1024
    monkeypatch.setattr(entities, "BOOK_CACHE_BYTES", budget)
    store = SQLiteFactStore(tmp_path / "books.db")
    index = store.vector_store()
    peak = 0
    for u in range(300):  # each book a few KB: the budget holds a few dozen
        said = [
            f"My sister Lena and our neighbour Omar came over to see the puppy we named Biscuit{u}",
            f"We are planning a trip to Lisbon with my colleague Ben and my cousin Ana in week {u}",
        ]
        add_with_entities(index, [
            Chunk(f"{u}-{i}", text, unit(u * 2 + i), {"namespace": f"user:{u}"}) for i, text in enumerate(said)
        ])  # fmt: skip
        peak = max(peak, entities.cached_books(store)[1])
    books, held = entities.cached_books(store)
    assert peak <= budget and held <= budget and 5 <= books < 300
    # A user whose book was dropped from the cache still has it: read back from the store.
    found = entity_candidates(index, "user:0", "How is Biscuit0 doing?", 5)
    assert found.entities and [chunk_id for chunk_id, _ in found.hits] == ["0-0"]
    assert entity_candidates(index, "user:1", "How is Biscuit0 doing?", 5).hits == []  # user 0's own
    store.close()
