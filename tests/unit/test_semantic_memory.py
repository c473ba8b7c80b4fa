"""Memory(recall=, semantic=, dedupe=, embedder=) end to end (acceptance 51-53, 67-76, H18)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from _vector_fakes import WordHashEmbedder

from fastaiagent import Agent, Memory, RunContext, trace
from fastaiagent.facts.semantic import subject_namespace
from fastaiagent.kb.backends.faiss import FaissVectorStore
from fastaiagent.learn import MemoryStore
from fastaiagent.llm.message import Message
from fastaiagent.testing import FunctionLLM


@dataclass
class Session:
    user_id: str


def ctx(user: str) -> RunContext:
    return RunContext(state=Session(user))


class Recorder:
    """The agent's model: replies "Noted." and keeps the text of every prompt."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.llm = FunctionLLM(self._answer)

    def _answer(self, messages: list[Message]) -> str:
        self.prompts.append("\n".join(f"{m.role}:{m.content}" for m in messages))
        return "Noted."


@pytest.fixture
def embedder():
    return WordHashEmbedder()


@pytest.fixture
def store(tmp_path):
    made = MemoryStore(tmp_path / "facts.db")
    yield made
    made.close()


def chatter(agent: Agent, user: str, n: int) -> None:
    for i in range(n):
        agent.run(f"small talk number {i} about the weather", context=ctx(user))


def test_shared_recall_store_never_returns_another_users_messages(store, embedder):  # acceptance 51, 67
    shared = FaissVectorStore(dimension=embedder.dimension)
    mem = Memory(
        location=store,
        user_id=lambda c: c.state.user_id,
        window=2,
        recall=shared,
        embedder=embedder,
    )
    model = Recorder()
    agent = Agent("a", model.llm, memory=mem)
    agent.run("my secret garden code is tulip", context=ctx("alice"))
    chatter(agent, "alice", 3)
    agent.run("I also have a garden code", context=ctx("bob"))
    chatter(agent, "bob", 3)
    agent.run("what is my garden code?", context=ctx("bob"))
    assert "tulip" not in model.prompts[-1]
    agent.run("what is my garden code?", context=ctx("alice"))
    assert "Relevant past messages" in model.prompts[-1] and "tulip" in model.prompts[-1]
    assert shared.count("user:alice") > 0 and shared.count("user:bob") > 0
    assert shared.count("default") == 0


def test_recall_namespace_is_prefixed_by_project(store, embedder):  # acceptance 52
    shared = FaissVectorStore(dimension=embedder.dimension)
    mem = Memory(
        location=store, user_id="alice", project_id="acme", recall=shared, embedder=embedder
    )
    Agent("a", Recorder().llm, memory=mem).run("remember the blue notebook please")
    mem.flush(timeout=10) if hasattr(mem, "flush") else None
    Agent("a", Recorder().llm, memory=mem).run("and the red pencil as well")
    assert shared.count("acme:user:alice") > 0
    assert shared.count("user:alice") == 0


def test_auto_recall_is_a_separate_index_per_user(store, embedder):  # acceptance 53
    mem = Memory(
        location=store,
        user_id=lambda c: c.state.user_id,
        window=2,
        recall="auto",
        embedder=embedder,
    )
    model = Recorder()
    agent = Agent("a", model.llm, memory=mem)
    agent.run("my locker number is 4417", context=ctx("alice"))
    chatter(agent, "alice", 2)
    agent.run("what is my locker number 4417?", context=ctx("bob"))
    assert "Relevant past messages" not in model.prompts[-1]
    agent.run("what is my locker number?", context=ctx("alice"))
    assert "my locker number is 4417" in model.prompts[-1]


def test_dedupe_drops_recalled_text_an_earlier_block_injected(store, embedder):  # acceptance 68
    for dedupe in (False, True):
        mem = Memory(
            location=store,
            user_id="carol",
            window=1,
            recall="auto",
            dedupe=dedupe,
            embedder=embedder,
        )
        mem.persist("Carol is allergic to peanuts", tier="user", id="carol")
        model = Recorder()
        agent = Agent("a", model.llm, memory=mem)
        agent.run("Carol is allergic to peanuts")
        agent.run("Carol enjoys peanut free chocolate")
        agent.run("what about peanuts for Carol?")
        occurrences = model.prompts[-1].count("Carol is allergic to peanuts")
        assert occurrences == (1 if dedupe else 2)
        mem.forget(tier="user", id="carol")


def test_semantic_retrieve_isolation_supersede_and_span(store, embedder):  # acceptance 69, 71, 76
    mem = Memory(location=store, semantic="auto", embedder=embedder)
    mem.persist("Dana lives in Paris", tier="user", id="dana")
    mem.persist("Dana has a cat named Miso", tier="user", id="dana")
    mem.persist("Erin lives in Madrid", tier="user", id="erin")
    # A query sharing a word with the fact: no ranking may rest on a tie of zero scores.
    assert [
        f.fact for f in mem.retrieve("where Dana lives", tier="user", id="dana", limit=1)
    ] == ["Dana lives in Paris"]
    assert mem.retrieve("lives", tier="user") == []
    mem.update("Dana lives in Rome", old="Dana lives in Paris", tier="user", id="dana")
    with trace.capture() as spans:
        facts = mem.retrieve("where Dana lives", tier="user", id="dana")
    assert "Dana lives in Paris" not in [f.fact for f in facts]
    assert facts[0].fact == "Dana lives in Rome"
    [span] = spans.named("memory.retrieve")
    assert span.attributes["memory.count"] == len(facts) == 2


def test_restart_and_other_writers_are_found(tmp_path, embedder):  # acceptance 73
    path = tmp_path / "shared.db"
    Memory(location=MemoryStore(path)).persist("Fay speaks Finnish", tier="user", id="fay")
    restarted = Memory(location=MemoryStore(path), semantic="auto", embedder=embedder)
    assert [f.fact for f in restarted.retrieve("finnish language", tier="user", id="fay")] == [
        "Fay speaks Finnish"
    ]
    Memory(location=MemoryStore(path)).persist("Fay plays Finnish baseball", tier="user", id="fay")
    found = {f.fact for f in restarted.retrieve("finnish", tier="user", id="fay")}
    assert found == {"Fay speaks Finnish", "Fay plays Finnish baseball"}


def test_vector_ids_are_uuids_with_fact_ids_on_qdrant(store, embedder):  # acceptance 74
    from fastaiagent.kb.backends.qdrant import QdrantVectorStore

    vectors = QdrantVectorStore(f"facts{uuid.uuid4().hex}", path=":memory:")
    mem = Memory(location=store, semantic=vectors, embedder=embedder)
    fact_id = mem.persist("Gus collects stamps", tier="user", id="gus")
    assert mem.retrieve("stamps", tier="user", id="gus")[0].id == fact_id
    (chunk,) = vectors.chunks(subject_namespace(("user", "gus", "")))
    assert uuid.UUID(chunk.id).version == 5
    assert chunk.metadata["fact_id"] == fact_id


def test_embedder_override_serves_recall_and_semantic(store):  # acceptance 75
    small = WordHashEmbedder(dimension=24)
    mem = Memory(
        location=store, user_id="hal", window=1, recall="auto", semantic="auto", embedder=small
    )
    agent = Agent("a", Recorder().llm, memory=mem)
    agent.run("Hal keeps bees in the garden")
    agent.run("what does Hal keep in the garden?")
    mem.persist("Hal keeps bees", tier="user", id="hal")
    assert mem.retrieve("bees", tier="user", id="hal")[0].fact == "Hal keeps bees"
    embedded = [t for call in small.calls for t in call]
    assert "Hal keeps bees in the garden" in embedded  # recall used it
    assert "Hal keeps bees" in embedded  # semantic used it
    mismatched = FaissVectorStore(dimension=384)
    mem2 = Memory(location=store, semantic=mismatched, embedder=small)
    with pytest.raises(ValueError, match="dimension"):
        mem2.retrieve("bees", tier="user", id="hal")


def test_forget_removes_recall_chunks_from_a_shared_store(store, embedder):  # acceptance H18
    shared = FaissVectorStore(dimension=embedder.dimension)
    mem = Memory(
        location=store, user_id=lambda c: c.state.user_id, recall=shared, embedder=embedder
    )
    agent = Agent("a", Recorder().llm, memory=mem)
    agent.run("ivy likes long hikes in the hills", context=ctx("ivy"))
    agent.run("jon likes long hikes too", context=ctx("jon"))
    agent.run("second message from ivy here", context=ctx("ivy"))
    assert shared.count("user:ivy") > 0
    mem.forget(tier="user", id="ivy")
    assert shared.count("user:ivy") == 0
    assert shared.count("user:jon") > 0


@pytest.mark.embedder
def test_spec_semantic_snippet_with_the_offline_model(tmp_path, monkeypatch):  # acceptance 69
    monkeypatch.chdir(tmp_path)
    mem = Memory(location="sqlite", semantic="auto")  # in-process FAISS + default embedder
    mem.persist("The user is allergic to peanuts", tier="user", id="alice")
    mem.persist("The user lives in Toronto", tier="user", id="alice")
    mem.persist("The user's favourite colour is teal", tier="user", id="alice")
    top = mem.retrieve("what foods should we avoid?", tier="user", id="alice")
    assert top[0].fact == "The user is allergic to peanuts"
