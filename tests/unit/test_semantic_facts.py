"""SemanticFactIndex: facts by meaning, with the fact store as the source of truth."""

from __future__ import annotations

import uuid

import pytest
from _vector_fakes import WordHashEmbedder

from fastaiagent.facts.fact import Fact
from fastaiagent.facts.semantic import SemanticFactIndex, subject_namespace
from fastaiagent.facts.sqlite.store import MemoryStore
from fastaiagent.kb.backends.faiss import FaissVectorStore
from fastaiagent.kb.protocols import DimensionMismatchError
from fastaiagent.recall.facts import search_facts


@pytest.fixture
def store(tmp_path):
    made = MemoryStore(tmp_path / "facts.db")
    yield made
    made.close()


@pytest.fixture
def embedder():
    return WordHashEmbedder()


def add(store, text, scope_id="alice", scope="user", project_id=""):
    return store.add(Fact(text, scope=scope, scope_id=scope_id, project_id=project_id))


def search(index, *args, **kwargs) -> list[Fact]:
    """The facts recall ranks for a query (without the reasons)."""
    return [fact for fact, _ in search_facts(index, *args, **kwargs)]


def found(facts) -> list[str]:
    return [f.fact for f in facts]


def test_search_returns_store_facts_by_relevance(store, embedder):
    add(store, "Alice is allergic to peanuts")
    add(store, "Alice works as a pilot")
    add(store, "Alice has two cats")
    index = SemanticFactIndex(store, "auto", embedder)
    results = search(index, "which pets does alice have? cats?", "user", "alice")
    assert results[0].fact == "Alice has two cats"
    assert all(isinstance(f, Fact) and f.id is not None for f in results)
    assert len(search(index, "pilot", "user", "alice", limit=1)) == 1


def test_scope_isolation(store, embedder):
    add(store, "Alice is allergic to peanuts", "alice")
    add(store, "Bob is allergic to shellfish", "bob")
    add(store, "Peanuts are served on every flight", scope="agent", scope_id="airline")
    index = SemanticFactIndex(store, "auto", embedder)
    assert found(search(index, "allergic", "user", "bob")) == ["Bob is allergic to shellfish"]
    assert found(search(index, "allergic", "user", "alice")) == ["Alice is allergic to peanuts"]
    assert search(index, "allergic", "user", "") == []
    assert search(index, "allergic", "project", "") == []
    assert search(index, "allergic", "user", "carol") == []
    assert set(found(search(index, "allergic", "user", "*"))) == {
        "Alice is allergic to peanuts",
        "Bob is allergic to shellfish",
    }


def test_project_partitions_subjects(store, embedder):
    add(store, "likes red wine", project_id="p1")
    add(store, "likes white wine", project_id="p2")
    index = SemanticFactIndex(store, "auto", embedder)
    assert found(search(index, "wine", "user", "alice", project_id="p1")) == ["likes red wine"]
    assert found(search(index, "wine", "user", "alice")) == []


def test_superseded_and_deleted_facts_are_never_returned_and_leave_the_index(store, embedder):
    vectors = FaissVectorStore(dimension=embedder.dimension)
    old = add(store, "Alice lives in Paris")
    index = SemanticFactIndex(store, vectors, embedder)
    assert found(search(index, "where does alice live", "user", "alice")) == ["Alice lives in Paris"]
    new = store.update(Fact("Alice lives in Rome", scope="user", scope_id="alice"), old)
    assert found(search(index, "where does alice live", "user", "alice")) == ["Alice lives in Rome"]
    namespace = subject_namespace(("user", "alice", ""))
    assert [c.metadata["fact_id"] for c in vectors.chunks(namespace)] == [new]
    store.delete("user", "alice")
    assert search(index, "where does alice live", "user", "alice") == []
    assert vectors.count(namespace) == 0


def test_restart_and_other_writers_are_backfilled_in_one_batch(tmp_path, embedder):
    path = tmp_path / "shared.db"
    writer = MemoryStore(path)  # e.g. another process writing the same database
    for i in range(25):
        add(writer, f"fact number {i} about topic{i}")
    add(writer, "Alice keeps bees on her roof")
    reader_store = MemoryStore(path)
    fresh = SemanticFactIndex(reader_store, "auto", embedder)  # empty in-process index
    assert found(search(fresh, "bees roof", "user", "alice", limit=1)) == [
        "Alice keeps bees on her roof"
    ]
    assert [len(c) for c in embedder.calls] == [26, 1]  # one backfill batch, then the query
    add(writer, "Alice plays the cello")
    assert found(search(fresh, "cello", "user", "alice", limit=1)) == ["Alice plays the cello"]
    assert [len(c) for c in embedder.calls][2:] == [1, 1]  # only the new fact, then the query
    writer.close()
    reader_store.close()


def test_vector_ids_are_stable_uuids_with_the_fact_id_in_metadata(store, embedder):
    fact_id = add(store, "Alice drives an electric car")
    vectors = FaissVectorStore(dimension=embedder.dimension)
    index = SemanticFactIndex(store, vectors, embedder)
    search(index, "car", "user", "alice")
    (chunk,) = vectors.chunks(subject_namespace(("user", "alice", "")))
    assert uuid.UUID(chunk.id).version == 5
    assert chunk.metadata["fact_id"] == fact_id
    assert chunk.id == SemanticFactIndex(store, "auto", embedder).vector_id(fact_id)
    other_store = MemoryStore(store.path.parent / "other.db")
    assert SemanticFactIndex(other_store, "auto", embedder).vector_id(fact_id) != chunk.id


def test_works_on_qdrant_and_a_new_index_reuses_stored_vectors(store, embedder, tmp_path):
    from fastaiagent.kb.backends.qdrant import QdrantVectorStore

    add(store, "Alice speaks Portuguese")
    add(store, "Alice runs marathons")
    vectors = QdrantVectorStore("facts", path=":memory:")
    index = SemanticFactIndex(store, vectors, embedder)
    assert found(search(index, "languages portuguese", "user", "alice", limit=1)) == [
        "Alice speaks Portuguese"
    ]
    embedded = embedder.texts_embedded
    again = SemanticFactIndex(store, vectors, embedder)  # another process sharing the store
    assert found(search(again, "marathons", "user", "alice", limit=1)) == ["Alice runs marathons"]
    assert embedder.texts_embedded == embedded + 1  # only the query: vectors were reused


def test_index_remove_and_forget(store, embedder):
    vectors = FaissVectorStore(dimension=embedder.dimension)
    index = SemanticFactIndex(store, vectors, embedder)
    a = add(store, "Alice likes jazz")
    b = add(store, "Alice likes opera")
    add(store, "Bob likes jazz", "bob")
    assert index.index([store.get(a), store.get(b)]) == 2
    assert index.index([store.get(a)]) == 0  # already indexed
    assert index.remove([b]) == 1
    assert vectors.count(subject_namespace(("user", "alice", ""))) == 1
    search(index, "jazz", "user", "bob")
    assert index.forget("user", "alice") == 1
    assert vectors.count(subject_namespace(("user", "alice", ""))) == 0
    assert vectors.count(subject_namespace(("user", "bob", ""))) == 1
    with pytest.raises(ValueError, match='empty id; pass scope_id="\\*" to delete every subject'):
        index.forget("user", "")


def test_bad_arguments(store, embedder):
    with pytest.raises(ValueError, match="vectors must be \"auto\" or a VectorStore, got 'faiss'"):
        SemanticFactIndex(store, "faiss", embedder)
    with pytest.raises(TypeError, match="vectors must be a VectorStore, got object"):
        SemanticFactIndex(store, object(), embedder)
    index = SemanticFactIndex(store, "auto", embedder)
    with pytest.raises(ValueError, match="unknown scope 'galaxy'; expected one of"):
        search(index, "x", "galaxy", "alice")
    with pytest.raises(ValueError, match="limit must be >= 0, got -1"):
        search(index, "x", "user", "alice", limit=-1)
    with pytest.raises(TypeError, match="query must be a str, got NoneType"):
        search(index, None, "user", "alice")  # type: ignore[arg-type]


def test_dimension_mismatch_is_a_clear_error(store, embedder):
    add(store, "Alice likes tea")
    index = SemanticFactIndex(store, FaissVectorStore(dimension=384), embedder)
    with pytest.raises(DimensionMismatchError, match="384"):
        search(index, "tea", "user", "alice")


def test_head_check_finds_new_writes_and_full_sync_finds_backdated_ones(store, embedder):
    for i in range(40):
        add(store, f"filler fact {i}")
    index = SemanticFactIndex(store, "auto", embedder, full_sync_seconds=3600, head_size=8)
    search(index, "filler", "user", "alice")
    store.add(Fact("Alice was born in 1990", scope="user", scope_id="alice", created_at=1.0))
    # Backdated below the head: invisible until the next full read...
    assert search(index, "born 1990", "user", "alice", limit=1)[0].fact != "Alice was born in 1990"
    index.full_sync_seconds = 0
    assert found(search(index, "born 1990", "user", "alice", limit=1)) == ["Alice was born in 1990"]
    add(store, "Alice adopted a parrot")  # ...while new writes are found at once
    index.full_sync_seconds = 3600
    assert found(search(index, "parrot", "user", "alice", limit=1)) == ["Alice adopted a parrot"]


def test_one_users_backfill_does_not_block_another_users_search(store):
    import threading

    class GatedEmbedder(WordHashEmbedder):
        """Holds any batch that embeds Alice's facts until released."""

        def __init__(self) -> None:
            super().__init__()
            self.gate = threading.Event()
            self.entered = threading.Event()

        def embed(self, texts):
            if any(t.startswith("Alice fact") for t in texts):
                self.entered.set()
                assert self.gate.wait(10)
            return super().embed(texts)

    embedder = GatedEmbedder()
    add(store, "Bob likes sailing", "bob")
    index = SemanticFactIndex(store, "auto", embedder)
    search(index, "sailing", "user", "bob")  # bob is indexed
    for i in range(50):
        add(store, f"Alice fact number {i}")
    backfill = threading.Thread(target=search, args=(index, "fact", "user", "alice"))
    backfill.start()
    assert embedder.entered.wait(10)  # alice's backfill is in progress (and held)
    assert found(search(index, "sailing", "user", "bob")) == ["Bob likes sailing"]
    embedder.gate.set()
    backfill.join(10)
    assert not backfill.is_alive()
    assert len(search(index, "fact", "user", "alice", limit=100)) == 50


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"retrieval": "bm25"}, ValueError, "retrieval must be one of 'hybrid', 'dense'"),
        ({"full_sync_seconds": -1}, ValueError, "full_sync_seconds must be >= 0"),
        ({"full_sync_seconds": "60"}, TypeError, "full_sync_seconds must be a number"),
        ({"head_size": 0}, ValueError, "head_size must be >= 1"),
        ({"head_size": 2.5}, TypeError, "head_size must be an int"),
        ({"dense_weight": 1.5}, ValueError, "dense_weight must be <= 1.0"),
        ({"dense_weight": True}, TypeError, "dense_weight must be a number"),
    ],
)
def test_semantic_index_arguments_follow_the_one_rule(tmp_path, kwargs, error, message):
    from fastaiagent.facts import SQLiteFactStore
    from fastaiagent.facts.semantic import SemanticFactIndex

    with pytest.raises(error, match=message):
        SemanticFactIndex(SQLiteFactStore(tmp_path / "f.db"), "auto", None, **kwargs)


def test_forget_of_one_fact_takes_its_vector_out_of_the_location_index(tmp_path):
    import sqlite3

    from _vector_fakes import WordHashEmbedder

    from fastaiagent import Memory

    location = f"sqlite:///{tmp_path / 'm.db'}"
    writer = Memory(location, user_id="ann", semantic="auto", embedder=WordHashEmbedder())
    writer.persist("Ann likes green tea", tier="user")
    writer.persist("Ann owns a kayak", tier="user")
    assert writer.retrieve("green tea", tier="user")  # writes both vectors
    assert Memory(location).forget(tier="user", id="ann", fact="ann likes  GREEN tea") == 1
    with sqlite3.connect(tmp_path / "m.db") as conn:
        texts = [row[0] for row in conn.execute("SELECT text FROM memory_vectors")]
    assert texts == ["Ann owns a kayak"]
