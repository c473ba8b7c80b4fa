"""Memory.add_history: a past conversation into recall without running the agent."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest
from _vector_fakes import WordHashEmbedder

from fastaiagent import Agent, Memory, RunContext
from fastaiagent.errors import InvalidValueError, UsageError
from fastaiagent.llm.message import AssistantMessage, UserMessage
from fastaiagent.testing import CannedLLM


@dataclass
class Session:
    user_id: str


HISTORY = [
    UserMessage("My dog Biscuit is a beagle and hates baths"),
    AssistantMessage("Beagles often dislike water; lukewarm baths help a lot."),
    UserMessage("I moved to Porto in April for the new job"),
    AssistantMessage("Porto is lovely in spring, congratulations on the job!"),
]
TIMES = [datetime(2024, 3, day, 12, tzinfo=timezone.utc) for day in (1, 1, 2, 2)]


def _memory(tmp_path: Path, embedder: WordHashEmbedder) -> Memory:
    return Memory(f"sqlite:///{tmp_path / 'm.db'}", user_id=lambda ctx: ctx.state.user_id,
                  recall="auto", embedder=embedder)  # fmt: skip


def test_a_history_is_recalled_in_the_next_run(tmp_path: Path) -> None:
    embedder = WordHashEmbedder()
    memory = _memory(tmp_path, embedder)
    assert memory.add_history(HISTORY, user_id="ann", at=TIMES) == 4
    assert embedder.calls == [[m.content for m in HISTORY]]  # one batch, not a run per turn
    llm = CannedLLM("ok")
    Agent(name="a", llm=llm, memory=memory).run("what is my dog called?", context=RunContext(state=Session("ann")))
    prompt = " ".join(str(m.content) for m in llm.calls[0])
    assert "Biscuit" in prompt
    index = memory.location.vector_store()  # type: ignore[attr-defined]
    stored = index.read_namespaces(["user:ann"])
    assert [c.metadata["created_at"] for c in stored][:4] == [t.timestamp() for t in TIMES]  # then the run's
    assert index.count("user:bob") == 0  # another user: nothing


def test_an_imported_answer_is_embedded_with_the_question_it_answers(tmp_path: Path) -> None:
    embedder = WordHashEmbedder()
    asked = [AssistantMessage("Welcome back! Which city do you live in now?"), UserMessage("Porto, since April.")]
    _memory(tmp_path, embedder).add_history(asked, user_id="ann", at=TIMES[:2])
    # As on a live turn (embed_question, the default): the answer is embedded with the agent's question.
    assert embedder.calls == [[asked[0].content, "Porto, since April. Which city do you live in now?"]]


def test_importing_the_same_history_again_adds_nothing(tmp_path: Path) -> None:
    memory = _memory(tmp_path, WordHashEmbedder())
    memory.add_history(HISTORY, user_id="ann", at=TIMES)
    memory.add_history(HISTORY, user_id="ann", at=TIMES)
    index = memory.location.vector_store()  # type: ignore[attr-defined]
    assert index.count("user:ann") == 4
    memory.add_history(HISTORY[:1], user_id="ann", at=[TIMES[0].timestamp() + 60])  # said again later
    assert index.count("user:ann") == 5


def test_bad_calls_are_refused_before_anything_is_stored(tmp_path: Path) -> None:
    memory = _memory(tmp_path, WordHashEmbedder())
    with pytest.raises(InvalidValueError, match="needs the user's id"):
        memory.add_history(HISTORY)
    with pytest.raises(InvalidValueError, match=r"one time per message \(4\)"):
        memory.add_history(HISTORY, user_id="ann", at=TIMES[:2])
    with pytest.raises(InvalidValueError, match="need a time zone"):
        memory.add_history(HISTORY[:1], user_id="ann", at=[datetime(2024, 1, 1)])
    with pytest.raises(UsageError, match="build the Memory with recall="):
        Memory(f"sqlite:///{tmp_path / 'n.db'}", user_id="ann").add_history(HISTORY)
    assert memory.location.vector_store().count("user:ann") == 0  # type: ignore[attr-defined]


def test_a_fixed_user_memory_imports_into_that_user_even_as_its_first_call(tmp_path: Path) -> None:
    """Memory(user_id="ann").add_history(...) with no user_id= is ann's history, never a
    shared default namespace another fixed-user Memory would also read."""
    location = f"sqlite:///{tmp_path / 'm.db'}"
    ann = Memory(location, user_id="ann", recall="auto", embedder=WordHashEmbedder())
    assert ann.add_history(HISTORY[:2], at=TIMES[:2]) == 2
    index = ann.location.vector_store()  # type: ignore[attr-defined]
    assert index.count("user:ann") == 2
    assert index.count("user:default") == 0
    bob = Memory(location, user_id="bob", recall="auto", embedder=WordHashEmbedder())
    llm = CannedLLM("ok")
    Agent(name="a", llm=llm, memory=bob).run("what is my dog called?")
    assert "Biscuit" not in " ".join(str(m.content) for m in llm.calls[0])
