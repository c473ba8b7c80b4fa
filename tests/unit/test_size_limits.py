"""Size limits (issue 15, item 6): fact text, metadata and the messages a shared
window stores are refused past a documented, configurable limit, with an error
that names the limit and how to raise it."""

from __future__ import annotations

import pytest

from fastaiagent import Agent, Memory
from fastaiagent.errors import InvalidValueError
from fastaiagent.facts import scoping
from fastaiagent.facts.sqlite.store import SQLiteFactStore
from fastaiagent.facts.windows import WindowKey
from fastaiagent.testing import FunctionLLM, echo_llm


@pytest.fixture
def store(tmp_path) -> SQLiteFactStore:  # type: ignore[no-untyped-def]
    return SQLiteFactStore(str(tmp_path / "facts.db"))


def test_the_defaults_are_documented_values() -> None:
    assert scoping.MAX_FACT_CHARS == 10_000
    assert scoping.MAX_METADATA_BYTES == 16_384
    assert scoping.MAX_MESSAGE_CHARS == 65_536


def test_fact_text_over_the_limit_names_the_setting(
    store: SQLiteFactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = Memory(location=store)
    with pytest.raises(
        InvalidValueError,
        match=r"fact text is 10,001 characters; the limit is 10,000.*scoping\.MAX_FACT_CHARS",
    ):
        memory.persist("x" * 10_001, tier="user", id="alice")
    monkeypatch.setattr(scoping, "MAX_FACT_CHARS", 20_000)  # read at each call
    memory.persist("x" * 10_001, tier="user", id="alice")
    assert len(memory.retrieve(tier="user", id="alice")[0].fact) == 10_001


def test_metadata_over_the_limit_is_refused_and_nothing_is_stored(
    store: SQLiteFactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = Memory(location=store)
    big = {"blob": "y" * (10 * 1024 * 1024)}  # the 10 MB
    with pytest.raises(
        InvalidValueError,
        match=r"metadata is [\d,]+ bytes of JSON; the limit is 16,384.*MAX_METADATA_BYTES",
    ):
        memory.persist("has a blob", tier="user", id="alice", metadata=big)
    assert memory.retrieve(tier="user", id="alice") == []
    fits = {"note": "z" * 16_000}
    memory.persist("has a note", tier="user", id="alice", metadata=fits)
    [fact] = memory.retrieve(tier="user", id="alice")
    assert fact.metadata == fits
    monkeypatch.setattr(scoping, "MAX_METADATA_BYTES", 11 * 1024 * 1024)
    memory.persist("has a blob", tier="user", id="alice", metadata=big)


def test_update_checks_the_new_facts_sizes_too(store: SQLiteFactStore) -> None:
    memory = Memory(location=store)
    memory.persist("likes tea", tier="user", id="alice")
    with pytest.raises(InvalidValueError, match="MAX_FACT_CHARS"):
        memory.update("x" * 10_001, old="likes tea", tier="user", id="alice")
    assert [f.fact for f in memory.retrieve(tier="user", id="alice")] == ["likes tea"]


def _shared(store: SQLiteFactStore, llm: FunctionLLM | None = None) -> tuple[Agent, Memory]:
    memory = Memory(location=store, user_id="alice", agent_id="limits", window_store="shared")
    return Agent(name="limits", llm=llm or echo_llm(), memory=memory), memory


def test_a_huge_message_is_refused_before_a_shared_window_stores_it(
    store: SQLiteFactStore,
) -> None:
    agent, memory = _shared(store)
    agent.run("hello")
    calls = []
    llm = FunctionLLM(lambda messages: calls.append(1) or "ok")
    agent = Agent(name="limits", llm=llm, memory=memory)
    with pytest.raises(
        InvalidValueError,
        match=r"the user message is 65,537 characters; the limit is 65,536.*MAX_MESSAGE_CHARS",
    ):
        agent.run("m" * 65_537)
    assert calls == []  # refused before the model ran
    stored = store.window_store().load(WindowKey("limits", "", "alice"))
    assert stored is not None and len(stored.state) < 10_000  # the window holds "hello" only
    agent.run("m" * 65_536)  # at the limit is fine


def test_a_huge_reply_is_refused_too(store: SQLiteFactStore) -> None:
    agent, _ = _shared(store, FunctionLLM(lambda messages: "r" * 70_000))
    with pytest.raises(InvalidValueError, match=r"the assistant message is 70,000 characters"):
        agent.run("hello")


def test_the_message_limit_can_be_raised(
    store: SQLiteFactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scoping, "MAX_MESSAGE_CHARS", 200_000)
    agent, _ = _shared(store)
    assert agent.run("m" * 100_000).output.endswith("m")


def test_in_process_windows_have_no_message_limit(store: SQLiteFactStore) -> None:
    memory = Memory(location=store, user_id="alice")
    agent = Agent(name="limits", llm=echo_llm(), memory=memory)
    assert agent.run("m" * 100_000).output.endswith("m")


def test_a_huge_message_is_recalled_by_its_start_not_stored_whole(monkeypatch):
    from _vector_fakes import WordHashEmbedder

    from fastaiagent.agent.memory_blocks.vector import VectorBlock
    from fastaiagent.kb.backends.faiss import FaissVectorStore
    from fastaiagent.llm.message import UserMessage

    store = FaissVectorStore(dimension=64)
    block = VectorBlock(store, embedder=WordHashEmbedder(), min_content_chars=1)
    block.on_message(UserMessage("start " + "x" * 2_000_000))
    block.flush()
    (chunk,) = store.chunks("default")
    assert len(chunk.text) == scoping.MAX_RECALL_CHARS and chunk.text.startswith("start ")
    assert chunk.metadata["chars"] == 2_000_006
    monkeypatch.setattr(scoping, "MAX_RECALL_CHARS", 100)  # a setting, read at each message
    block.on_message(UserMessage("again " + "y" * 1_000))
    block.flush()
    assert sorted(len(c.text) for c in store.chunks("default")) == [100, 16_384]
