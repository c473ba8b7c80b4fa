"""One fact store, embedders of several sizes (#33): an index per size, never one per location.

On SQLite, the real Postgres and the real Redis: two ``Memory`` objects whose
embedders differ in size share one location, each recalling its own user's
messages; an agent whose embedder changes size has the user's older messages
re-embedded into the new size's index in the background; a forget of a user
empties every size's index and leaves the other users alone.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from _vector_fakes import WordHashEmbedder

from fastaiagent import Agent, Memory
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.index.embedding_cache import EMBEDDER_KEY, identity_of
from fastaiagent.facts.index.reembed import Reembedding, background_job
from fastaiagent.testing import FunctionLLM

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("redis", id="redis", marks=pytest.mark.redis),
]
ALICE = ["I moved to Lisbon in spring", "My dog is called Biscuit", "I play tennis on Sundays"]
BOB = ["I grow tomatoes on the balcony", "My sister lives in Oslo", "I collect old maps"]


@pytest.fixture(params=BACKENDS)
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """opener(name) -> a new fact store object on this test's own location ``name``
    (a second call opens the same location again, as another process would)."""
    stores: list[Any] = []

    def opener(name: str = "") -> Any:
        if request.param == "sqlite":
            from fastaiagent.facts.sqlite.store import SQLiteFactStore

            stores.append(SQLiteFactStore(tmp_path / f"memory{name}.db"))
        elif request.param == "postgres":
            from fastaiagent.facts.postgres.store import PostgresFactStore

            url, table = request.getfixturevalue("postgres_url"), request.getfixturevalue("pg_table")
            stores.append(PostgresFactStore(url, table=table + name))
        else:
            from fastaiagent.facts.redis.store import RedisFactStore

            url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
            stores.append(RedisFactStore(url, prefix=prefix + name))
        return stores[-1]

    yield opener
    for store in stores:
        store.destroy()  # a second store on the same location finds nothing left: fine
        store.close()


def memory(store: Any, user: str, embedder: Any) -> Memory:
    return Memory(location=store, user_id=user, recall="auto", embedder=embedder, window=2)


def tell(mem: Memory, texts: list[str]) -> None:
    agent = Agent("t", FunctionLLM(lambda messages: "ok"), memory=mem)
    for text in texts:
        agent.run(text)
    mem.flush()


def recalled(mem: Memory, question: str) -> str:
    """The system text the LLM saw for ``question`` (where recalled messages go)."""
    seen: list[str] = []

    def reply(messages: list[Any]) -> str:
        seen.append("\n".join(m.content or "" for m in messages if m.role == "system"))
        return "ok"

    Agent("t", FunctionLLM(reply), memory=mem).run(question)
    return seen[-1]


def held(store: Any, namespace: str) -> dict[int, int]:
    """How many chunks of ``namespace`` each size's index holds."""
    return {index.dimension: index.count(namespace) for index in store.vector_indexes()}


def test_vector_store_gives_one_index_per_size(open_store) -> None:
    store = open_store()
    default = store.vector_store()
    assert store.vector_dimensions() == []
    assert store.vector_store(64) is default  # nothing held yet: the default takes the size
    assert default.dimension == 64 and store.vector_store() is default
    other = store.vector_store(96)
    assert other is not default and other is store.vector_store(96)  # made once per store
    assert other.dimension == 96 and repr(other) != repr(default)
    assert store.vector_dimensions() == [64, 96]
    reopened = open_store()  # another process finds the sibling in the database
    assert reopened.vector_dimensions() == [64, 96]
    assert [index.dimension for index in reopened.vector_indexes()] == [64, 96]


@pytest.mark.parametrize("bad", [0, -3, True, 1.5, "768"])
def test_a_bad_dimension_is_refused_clearly(open_store, bad: Any) -> None:
    store = open_store()
    with pytest.raises((InvalidValueError, InvalidTypeError), match="dimension"):
        store.vector_store(bad)
    assert store.vector_dimensions() == []  # nothing was made


def test_two_embedders_of_different_sizes_share_a_store(open_store) -> None:
    store = open_store()
    small = memory(store, "alice", WordHashEmbedder(64))
    big = memory(store, "bob", WordHashEmbedder(96))
    tell(small, ALICE)
    tell(big, BOB)  # raised DimensionMismatchError when a location held one size
    assert store.vector_dimensions() == [64, 96]
    assert held(store, "user:alice") == {64: 3, 96: 0}
    assert held(store, "user:bob") == {64: 0, 96: 3}
    small_index = store.vector_store(64)
    assert small_index.holds("user:alice") and not small_index.holds("user:bob")
    assert "Lisbon" in recalled(small, "where did I move to, Lisbon?")
    assert "Oslo" in recalled(big, "who lives in Oslo?")
    again = memory(open_store(), "bob", WordHashEmbedder(96))  # another process, same size
    assert "tomatoes" in recalled(again, "what grows on the balcony, tomatoes?")


class GatedEmbedder(WordHashEmbedder):
    """Word hashes whose background re-embedding waits for ``release`` (a slow model)."""

    def __init__(self, dimension: int) -> None:
        super().__init__(dimension)
        self.release = threading.Event()
        self.embedding = threading.Event()  # a background batch has started

    def embed(self, texts: list[str]) -> list[list[float]]:
        if threading.current_thread().name == "fastaiagent-reembed":
            self.embedding.set()
            assert self.release.wait(30)
        return super().embed(texts)


def test_a_new_embedder_size_reembeds_the_users_messages_in_the_background(open_store) -> None:
    store = open_store()
    tell(memory(store, "alice", WordHashEmbedder(64)), ALICE)
    tell(memory(store, "bob", WordHashEmbedder(64)), BOB)
    bigger = GatedEmbedder(96)
    switched = memory(open_store(), "alice", bigger)  # the agent restarts with a bigger model
    first = recalled(switched, "where did I move to, Lisbon?")
    assert "moved to Lisbon" not in first  # nothing at 96 yet: no 64-size vector is ranked
    job = background_job(switched.location.vector_store(96), "user:alice")
    assert job is not None and job.state in ("pending", "running")
    bigger.release.set()
    assert job.wait(30) and job.state == "done" and job.done == 3
    index = store.vector_store(96)
    chunks = index.chunks("user:alice")
    assert {c.metadata[EMBEDDER_KEY] for c in chunks} == {identity_of(bigger)}  # one size only
    assert {c.text for c in chunks} >= set(ALICE)
    assert "moved to Lisbon" in recalled(switched, "where did I move to, Lisbon?")
    assert held(store, "user:alice")[64] == 3  # the old size keeps serving its agents
    assert held(store, "user:bob") == {64: 3, 96: 0}  # only the switched user moved


def test_a_carry_over_cut_short_by_a_restart_resumes(open_store) -> None:
    store = open_store()
    tell(memory(store, "alice", WordHashEmbedder(64)), ALICE)
    bigger = WordHashEmbedder(96)
    cut = Reembedding(store.vector_store(64), bigger, namespaces=["user:alice"],
                      target=store.vector_store(96), batch_size=1)  # fmt: skip
    cut.on_progress = lambda job: job.cancel()  # the process stops after one message
    assert cut.run().state == "cancelled" and held(store, "user:alice") == {64: 3, 96: 1}
    restarted = memory(open_store(), "alice", bigger)
    recalled(restarted, "what is my dog called?")
    job = background_job(restarted.location.vector_store(96), "user:alice")
    assert job is not None and job.wait(30) and job.state == "done" and job.done == 2
    assert {c.text for c in store.vector_store(96).chunks("user:alice")} >= set(ALICE)
    assert held(store, "user:alice") == {64: 3, 96: 4}  # and the question just asked
    again = memory(open_store(), "alice", bigger)  # nothing is missing now: no new job
    recalled(again, "what is my dog called?")
    assert background_job(again.location.vector_store(96), "user:alice") is None


@pytest.mark.parametrize("door", ["plain", "configured", "purge"])
def test_forget_empties_every_size_and_leaves_other_users(open_store, door: str) -> None:
    store = open_store()
    for user, texts in (("alice", ALICE), ("bob", BOB)):
        tell(memory(store, user, WordHashEmbedder(64)), texts)
        tell(memory(store, user, WordHashEmbedder(96)), texts[:1])  # both sizes hold both users
        job = background_job(store.vector_store(96), f"user:{user}")  # 64's three, carried over
        assert job is not None and job.wait(30) and job.state == "done"
    assert held(store, "user:alice") == {64: 3, 96: 4}
    if door == "plain":
        Memory(open_store()).forget(tier="user", id="alice")  # no embedder, no recall=
    elif door == "configured":
        memory(open_store(), "carol", WordHashEmbedder(96)).forget(tier="user", id="alice")
    else:  # the recall purge alone, handed one size's index: it empties every size
        stack = memory(store, "carol", WordHashEmbedder(64))._stack
        assert stack.purge_recall("alice", [store.vector_store(64)]) == 7
    assert held(store, "user:alice") == {64: 0, 96: 0}
    assert held(store, "user:bob") == {64: 3, 96: 4}


def test_forget_during_a_reembedding_leaves_nothing_behind(open_store) -> None:
    store = open_store()
    tell(memory(store, "alice", WordHashEmbedder(64)), ALICE)
    bigger = GatedEmbedder(96)
    switched = memory(store, "alice", bigger)
    recalled(switched, "where did I move to?")  # queues the job; it waits on its first batch
    job = background_job(store.vector_store(96), "user:alice")
    assert job is not None and bigger.embedding.wait(30)
    threading.Timer(0.3, bigger.release.set).start()  # the batch finishes while forget waits
    switched.forget(tier="user", id="alice")
    assert job.wait(30) and job.state == "cancelled"
    assert held(store, "user:alice") == {64: 0, 96: 0}  # the job wrote nothing back


def test_forget_cancels_a_reembedding_still_queued(open_store) -> None:
    store = open_store()
    for user, texts in (("alice", ALICE), ("bob", BOB)):
        tell(memory(store, user, WordHashEmbedder(64)), texts)
    bigger = GatedEmbedder(96)
    recalled(memory(store, "bob", bigger), "where do I work?")  # bob's job holds the worker
    assert bigger.embedding.wait(30)
    recalled(memory(store, "alice", bigger), "where did I move to?")
    queued = background_job(store.vector_store(96), "user:alice")
    assert queued is not None and queued.state == "pending"
    memory(store, "alice", WordHashEmbedder(64)).forget(tier="user", id="alice")
    bigger.release.set()
    bobs = background_job(store.vector_store(96), "user:bob")
    assert queued.wait(30) and queued.state == "cancelled" and queued.done == 0
    assert bobs is not None and bobs.wait(30) and bobs.state == "done"
    assert held(store, "user:alice") == {64: 0, 96: 0}
    assert held(store, "user:bob") == {64: 3, 96: 4}


def test_export_and_import_carry_every_size(open_store, tmp_path: Path) -> None:
    from fastaiagent.facts.transfer import export_memory, import_memory

    store = open_store()
    tell(memory(store, "alice", WordHashEmbedder(64)), ALICE)
    tell(memory(store, "alice", WordHashEmbedder(96)), ALICE[:1])
    job = background_job(store.vector_store(96), "user:alice")
    assert job is not None and job.wait(30) and job.state == "done"
    tell(memory(store, "bob", WordHashEmbedder(96)), BOB)
    path = tmp_path / "alice.jsonl"
    assert export_memory(store, path, user_id="alice").as_dict()["recall"] == 7
    target = open_store("copy")
    target.vector_store(96)  # the target's default index holds the other size
    import_memory(target, path)
    assert held(target, "user:alice") == held(store, "user:alice") == {64: 3, 96: 4}
    assert held(target, "user:bob") == {64: 0, 96: 0}
    again = import_memory(target, path)  # a repeat adds nothing
    assert again.kept >= 7 and held(target, "user:alice") == {64: 3, 96: 4}
