"""A changed embedder on a durable index: detected, re-embedded in the background, never mixed.

On SQLite, the real Postgres and the real Redis: a Reembedding job rewrites a
namespace's vectors with the new model (each text embedded once, progress
reported, a repeat after a failure finishes the rest, other namespaces and
forgotten chunks untouched); a model of another size goes to a new index;
recall and semantic facts leave an earlier model's vectors out of the ranking
and hand the namespace to the background job.
"""

from __future__ import annotations

import hashlib
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from _vector_fakes import WordHashEmbedder

from fastaiagent import Memory
from fastaiagent.facts.index.embedding_cache import EMBEDDER_KEY, identity_of
from fastaiagent.facts.index.reembed import Reembedding, background_job
from fastaiagent.facts.vectors import REPLIES_TO_KEY, embedded_text
from fastaiagent.kb.protocols import Chunk, DimensionMismatchError

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("redis", id="redis", marks=pytest.mark.redis),
]


class ModelEmbedder(WordHashEmbedder):
    """Another "model": the same words hash to other buckets (its own identity)."""

    def __init__(self, model: str, dimension: int = 64, fail_after: int | None = None) -> None:
        super().__init__(dimension)
        self.model = model
        self.fail_after = fail_after  # raise once this many texts were embedded
        self.on_embed: Callable[[], None] | None = None

    def embed(self, texts: list[str]) -> list[list[float]]:
        if self.fail_after is not None and self.texts_embedded >= self.fail_after:
            raise RuntimeError("the model server went away")
        if self.on_embed is not None:
            self.on_embed()
        salted = [f"{text} {hashlib.md5(self.model.encode()).hexdigest()[:6]}" for text in texts]
        vectors = super().embed(salted)
        self.calls[-1] = list(texts)
        return vectors


@pytest.fixture(params=BACKENDS)
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[str], Any]]:
    """opener(name) -> a fact store on this backend's storage ``name`` (one per name)."""
    stores: list[Any] = []

    def opener(name: str = "main") -> Any:
        if request.param == "sqlite":
            from fastaiagent.facts.sqlite.store import SQLiteFactStore

            stores.append(SQLiteFactStore(tmp_path / f"{name}.db"))
        elif request.param == "postgres":
            from fastaiagent.facts.postgres.store import PostgresFactStore

            table = request.getfixturevalue("pg_table")
            stores.append(PostgresFactStore(request.getfixturevalue("postgres_url"), table=f"{table}{name}"))
        else:
            from fastaiagent.facts.redis.store import RedisFactStore

            prefix = request.getfixturevalue("redis_prefix")
            stores.append(RedisFactStore(request.getfixturevalue("redis_url"), prefix=f"{prefix}{name}"))
        return stores[-1]

    yield opener
    for store in stores:
        store.destroy()
        store.close()


TEXTS = [f"note {i} about {word}" for i, word in enumerate(["lisbon", "peanuts", "biscuit", "tennis"] * 10)]


def _fill(index: Any, embedder: ModelEmbedder, namespace: str, texts: list[str] = TEXTS) -> None:
    vectors = embedder.embed(texts)
    identity = identity_of(embedder)
    index.add([
        Chunk(f"{namespace}-{i}", t, v, {"namespace": namespace, EMBEDDER_KEY: identity})
        for i, (t, v) in enumerate(zip(texts, vectors, strict=True))
    ])


def _identities(index: Any, namespace: str) -> set[str]:
    return {c.metadata.get(EMBEDDER_KEY) for c in index.chunks(namespace)}


def test_a_job_rewrites_one_namespace_with_the_new_model_once(open_store) -> None:
    index = open_store().vector_store()
    old, new = ModelEmbedder("one"), ModelEmbedder("two")
    _fill(index, old, "user:alice")
    _fill(index, old, "user:bob")
    seen: list[tuple[int, int]] = []
    job = Reembedding(index, new, namespaces=["user:alice"], batch_size=16,
                      on_progress=lambda j: seen.append((j.done, j.total))).run()
    assert job.state == "done" and (job.done, job.total) == (40, 40)
    assert seen == [(16, 40), (32, 40), (40, 40)]
    assert _identities(index, "user:alice") == {"two@64"}
    assert _identities(index, "user:bob") == {"one@64"}  # another user's vectors untouched
    assert new.texts_embedded == 40  # each text once
    query = new.embed(["note 5 about peanuts"])[0]
    assert index.search(query, 1, namespace="user:alice")[0].chunk.id == "user:alice-5"
    again = Reembedding(index, new, namespaces=["user:alice"]).run()
    assert again.total == 0 and new.texts_embedded == 41  # only the query above


def test_a_job_embeds_an_answer_with_the_question_it_answers(open_store) -> None:
    index = open_store().vector_store()
    old, new = ModelEmbedder("one"), ModelEmbedder("two")
    answer = Chunk("a", "They are the Aura 300, in sage green.", None,
                   {"namespace": "user:alice", REPLIES_TO_KEY: "Which headphones do you have?"})
    plain = Chunk("p", "note about tennis", None, {"namespace": "user:alice"})
    index.add([Chunk(c.id, c.text, old.embed([c.text])[0], {**c.metadata, EMBEDDER_KEY: identity_of(old)})
               for c in (answer, plain)])  # fmt: skip
    assert Reembedding(index, new, namespaces=["user:alice"]).run().state == "done"
    # The same text the live path embeds: re-embedding keeps what an answer is about.
    assert sorted(new.calls[-1]) == sorted([embedded_text(answer), plain.text])
    paired = new.embed([embedded_text(answer)])[0]
    top = index.search(paired, 1, namespace="user:alice")[0]
    assert top.chunk.id == "a" and top.score == pytest.approx(1.0)  # that text's vector is stored


def test_a_failed_job_is_finished_by_a_repeat_without_embedding_twice(open_store) -> None:
    index = open_store().vector_store()
    _fill(index, ModelEmbedder("one"), "user:alice")
    flaky = ModelEmbedder("two", fail_after=16)
    job = Reembedding(index, flaky, batch_size=16)
    with pytest.raises(RuntimeError, match="went away"):
        job.run()
    assert job.state == "failed" and job.done == 16 and job.wait(0)
    flaky.fail_after = None
    rest = Reembedding(index, flaky, batch_size=16).run()
    assert rest.total == 24  # the first batch was kept
    assert flaky.texts_embedded == 40
    assert _identities(index, "user:alice") == {"two@64"}


def test_a_chunk_forgotten_during_the_job_is_not_written_back(open_store) -> None:
    index = open_store().vector_store()
    _fill(index, ModelEmbedder("one"), "user:alice")
    new = ModelEmbedder("two")
    new.on_embed = lambda: index.delete_namespace("user:alice")  # a forget races the job
    Reembedding(index, new, namespaces=["user:alice"]).run()
    assert index.chunks("user:alice") == []


def test_another_size_goes_to_a_new_index_and_is_never_mixed(open_store) -> None:
    index = open_store().vector_store()
    _fill(index, ModelEmbedder("one"), "user:alice")
    bigger = ModelEmbedder("three", dimension=96)
    with pytest.raises(DimensionMismatchError, match="target=new_index"):
        Reembedding(index, bigger)
    target = open_store("new").vector_store()
    Reembedding(index, bigger, target=target).run()
    assert target.dimension == 96 and index.dimension == 64
    assert _identities(target, "user:alice") == {"three@96"}
    assert _identities(index, "user:alice") == {"one@64"}  # the old index keeps serving
    query = bigger.embed(["note 6 about biscuit"])[0]
    assert target.search(query, 1, namespace="user:alice")[0].chunk.id == "user:alice-6"


def test_recall_leaves_an_earlier_models_vectors_out_and_reembeds_them(open_store, caplog) -> None:
    from fastaiagent.agent.memory_blocks.vector import VectorBlock

    caplog.set_level("INFO", logger="fastaiagent.facts.index.reembed")
    index = open_store().vector_store()
    namespace = f"user:u{uuid.uuid4().hex[:8]}"  # what Memory(recall="auto") names a user's recall
    _fill(index, ModelEmbedder("one"), namespace)
    block = VectorBlock(index, embedder=ModelEmbedder("two"), namespace=namespace, retrieval="dense")
    first = block.recall("note 5 about peanuts")
    assert first == []  # every stored vector is model one's: none is ranked against model two
    job = background_job(index, namespace)
    assert job is not None and job.wait(30) and job.state == "done"
    assert _identities(index, namespace) == {"two@64"}
    assert f"re-embedding ['{namespace}']: 40 of 40 chunks" in caplog.text  # progress is reported
    ids = [item.chunk.id for item in block.recall("note 5 about peanuts")]
    assert ids[0] == f"{namespace}-5"


def test_semantic_facts_of_an_earlier_model_are_reembedded_in_the_background(open_store) -> None:
    store = open_store()
    user = f"u{uuid.uuid4().hex[:8]}"
    old = Memory(location=store, semantic="auto", embedder=ModelEmbedder("one"))
    for text in TEXTS[:8]:
        old.persist(text, tier="user", id=user)
    assert old.retrieve("peanuts", tier="user", id=user)  # indexed with model one
    new_model = ModelEmbedder("two")
    new = Memory(location=store, semantic="auto", embedder=new_model)
    new.retrieve("peanuts", tier="user", id=user)  # detects model one's vectors
    namespace = next(ns for ns in _namespaces(store) if user in ns)
    job = background_job(store.vector_store(), namespace)
    assert job is not None and job.wait(30) and job.state == "done"
    assert _identities(store.vector_store(), namespace) == {"two@64"}
    embedded = [text for call in new_model.calls for text in call]
    assert sorted(embedded) == sorted([*TEXTS[:8], "peanuts"])  # each text once, the query too
    found = new.retrieve("note 1 about peanuts", tier="user", id=user, limit=1)
    assert [f.fact for f in found] == ["note 1 about peanuts"]


def _namespaces(store: Any) -> set[str]:
    return {c.metadata["namespace"] for c in store.vector_store().chunks(None)}


def test_forget_stops_a_running_background_job_before_it_writes_the_user_back(open_store) -> None:
    import threading

    from fastaiagent.agent.memory_blocks.vector import VectorBlock

    index = open_store().vector_store()
    namespace = f"user:u{uuid.uuid4().hex[:8]}"
    _fill(index, ModelEmbedder("one"), namespace, TEXTS * 4)  # 160 chunks: several batches
    slow = ModelEmbedder("two")
    embedding = threading.Event()

    def pause() -> None:
        if threading.current_thread().name == "fastaiagent-reembed":
            embedding.set()
            threading.Event().wait(0.2)  # a batch takes a while

    slow.on_embed = pause
    block = VectorBlock(index, embedder=slow, namespace=namespace, retrieval="dense")
    block.recall("note 5 about peanuts")  # queues the job
    assert embedding.wait(30)
    job = background_job(index, namespace)
    assert job is not None
    block.clear()  # what forget does for the user's recall
    assert job.state == "cancelled" and job.wait(0)
    threading.Event().wait(0.5)
    assert index.chunks(namespace) == []  # nothing was written back
