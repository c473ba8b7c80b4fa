"""No silent fallbacks (issue #46), on SQLite, Postgres and Redis.

- A missing extra for what a Memory was asked to do (the embedder of ``recall=``
  or ``semantic=``) raises MissingExtraError when the Memory is built, naming
  the extra, not at the first turn (which used to log and run without recall).
- The store's vector index that fails to open is never replaced by an
  in-process FAISS index (its entries would die with the process and a forget
  from elsewhere would miss them): a damaged index raises from the run; an index
  whose store is down leaves recall out of that turn and is opened, durable,
  once the store answers.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from _vector_fakes import WordHashEmbedder

from fastaiagent import Agent, Memory, RunContext
from fastaiagent.errors import MissingExtraError, StoreCorruptError, StoreUnavailableError
from fastaiagent.kb import embedding
from fastaiagent.testing import echo_llm


@dataclass
class Session:
    user_id: str


def _without_embedders(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine as one without the [local] and [openai] extras."""
    monkeypatch.setattr(embedding, "local_available", lambda: False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    real = embedding.importlib.util.find_spec
    monkeypatch.setattr(
        embedding.importlib.util, "find_spec", lambda name, *a: None if name == "openai" else real(name, *a)
    )


@pytest.mark.parametrize(
    "keywords",
    [{"recall": "auto"}, {"semantic": "auto"}, {"recall": "auto", "embedder": "openai"}],
    ids=["recall", "semantic", "openai-embedder"],
)
def test_a_missing_embedder_extra_raises_when_the_memory_is_built(any_location, monkeypatch, keywords):
    _without_embedders(monkeypatch)
    with pytest.raises(MissingExtraError) as info:
        Memory(any_location, user_id="alice", **keywords)
    assert "pip install 'fastaiagent[" in str(info.value)


def _recall_memory(location: str) -> tuple[Memory, Agent]:
    memory = Memory(
        location, user_id=lambda ctx: ctx.state.user_id, recall="auto", embedder=WordHashEmbedder(16)
    )
    return memory, Agent(name="support", llm=echo_llm(), memory=memory)


def _failing_once(store: Any, error: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's index fails to open (as a damaged or unreachable one does) once."""
    real, calls = store.vector_store, []

    def vector_store(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "vector_store", vector_store)


def _faiss_anywhere(memory: Memory) -> bool:
    from fastaiagent.kb.backends.faiss import FaissVectorStore

    blocks = [b for user in memory.cached_users for b in memory._users.get(user).own_blocks]
    return any(isinstance(getattr(b, "store", None), FaissVectorStore) for b in blocks)


def test_a_damaged_vector_index_raises_instead_of_an_in_process_one(any_location, monkeypatch):
    memory, agent = _recall_memory(any_location)
    _failing_once(memory.location, StoreCorruptError("the vector index is damaged"), monkeypatch)
    with pytest.raises(StoreCorruptError, match="damaged"):
        agent.run("I adopted a beagle", context=RunContext(state=Session("alice")))
    assert not _faiss_anywhere(memory)


def test_an_index_whose_store_is_down_is_opened_durable_once_it_answers(any_location, monkeypatch):
    memory, agent = _recall_memory(any_location)
    _failing_once(memory.location, StoreUnavailableError("the store is down"), monkeypatch)
    # The outage degrades the turn: it answers, without recall, and without FAISS.
    said = agent.run("I adopted a beagle", context=RunContext(state=Session("alice")))
    assert said.output == "You said: I adopted a beagle"
    assert not _faiss_anywhere(memory)
    # The store answers again: the next user's recall is the store's own, durable index.
    agent.run("My cat is called Miso", context=RunContext(state=Session("bob")))
    assert not _faiss_anywhere(memory)
    index = memory.location.vector_store(16)  # type: ignore[attr-defined]
    assert index.count("user:bob") == 2
