"""Memory(max_memory_tokens=...): what memory injects fits a budget; the window is never cut."""

from __future__ import annotations

import asyncio

import pytest
from _vector_fakes import WordHashEmbedder

from fastaiagent import Agent, Memory, trace
from fastaiagent.agent import ComposableMemory, StaticBlock
from fastaiagent.agent.memory_blocks import framing
from fastaiagent.agent.memory_budget import estimate_tokens, pack
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.kb.backends.faiss import FaissVectorStore
from fastaiagent.learn import MemoryStore
from fastaiagent.llm.message import SystemMessage, UserMessage
from fastaiagent.testing import CannedLLM

GLOBAL_FACT = "Answers are given in British English"
USER_FACT = "Ana is allergic to peanuts"
OLD_TURN = "my locker number at the gym is 4417"


@pytest.fixture
def store(tmp_path):
    made = MemoryStore(tmp_path / "facts.db")
    yield made
    made.close()


def memory(store, **options) -> Memory:
    mem = Memory(
        location=store,
        user_id="ana",
        agent_id="bot",
        window=2,
        recall=FaissVectorStore(dimension=64),
        embedder=WordHashEmbedder(),
        **options,
    )
    mem.persist(GLOBAL_FACT, tier="global", id="bot")
    mem.persist(USER_FACT, tier="user", id="ana")
    return mem


def last_prompt(mem: Memory, question: str) -> tuple[list, CannedLLM]:
    llm = CannedLLM(["Noted."] * 4)
    agent = Agent("a", llm, memory=mem)
    agent.run(OLD_TURN)  # leaves the window (2 messages) after the next turn
    agent.run("the weather is grey today")
    agent.run(question)
    return llm.calls[-1], llm


def section_tokens(text: str) -> int:
    head, notes = framing.split_section(text)  # type: ignore[misc]
    return estimate_tokens(head) + sum(estimate_tokens(n) for n in notes)


def test_without_a_budget_facts_and_recall_all_reach_the_model(store):
    messages, _ = last_prompt(memory(store), "what is my locker number at the gym?")
    text = "\n".join(m.content or "" for m in messages)
    assert GLOBAL_FACT in text and USER_FACT in text and OLD_TURN in text


def test_the_budget_drops_the_lowest_priority_notes_and_keeps_the_window(store):
    unbudgeted, _ = last_prompt(memory(store), "what is my locker number at the gym?")
    facts = [m for m in unbudgeted if m.role == "system" and "Facts" in (m.content or "")]
    budget = sum(section_tokens(m.content or "") for m in facts)  # facts fit, recall does not
    mem = memory(store, max_memory_tokens=budget)
    with trace.capture() as spans:
        messages, _ = last_prompt(mem, "what is my locker number at the gym?")
    text = "\n".join(m.content or "" for m in messages)
    assert GLOBAL_FACT in text and USER_FACT in text
    assert OLD_TURN not in text  # recall is the lowest priority
    window = [m.content for m in messages if m.role != "system"]
    assert window == ["the weather is grey today", "Noted.", "what is my locker number at the gym?"]
    read = spans.named("memory.read")[-1]
    assert read.attributes["memory.budget_tokens"] == budget
    assert read.attributes["memory.tokens"] <= budget
    assert read.attributes["memory.dropped_count"] >= 1
    assert any(OLD_TURN in d and d.startswith("vector: ") for d in read.attributes["memory.dropped"])


def test_a_tiny_budget_drops_every_note_but_never_the_window(store):
    messages, _ = last_prompt(memory(store, max_memory_tokens=1), "what is my locker number?")
    assert [m.role for m in messages] == ["user", "assistant", "user"]
    assert messages[-1].content == "what is my locker number?"


def test_a_note_that_does_not_fit_leaves_room_for_a_shorter_one():
    long_note = "x" * 400
    text = framing.notes_section("Heading:", [long_note, "short note"], ["manual", "manual"])
    head, _ = framing.split_section(text)  # type: ignore[misc]
    budget = estimate_tokens(head) + estimate_tokens('- "short note" (manual)')
    packed = pack([("facts", [SystemMessage(text)])], budget)
    [kept] = packed.messages
    assert "short note" in (kept.content or "") and long_note not in (kept.content or "")
    assert packed.tokens == budget
    assert [block for block, _ in packed.dropped] == ["facts"]


def test_blocks_are_packed_in_priority_order_and_plain_text_is_kept_whole():
    first = SystemMessage("pinned instructions for every turn")
    second = SystemMessage(framing.notes_section("Notes:", ["a note"], ["manual"]))
    packed = pack([("static", [first]), ("notes", [second])], estimate_tokens(first.content or ""))
    assert packed.messages == [first]
    assert packed.dropped[0][0] == "notes"
    nothing = pack([("static", [first])], 2)
    assert nothing.messages == [] and nothing.dropped == [("static", first.content)]


def test_split_section_reads_only_what_section_wrote():
    text = framing.notes_section("Facts:", ["one", "two"], ["manual", "global"])
    head, notes = framing.split_section(text)  # type: ignore[misc]
    assert head.startswith("Facts:\n") and notes == ['- "one" (manual)', '- "two" (global)']
    assert framing.split_section("pinned text") is None
    assert framing.split_section("Heading\nnot a preamble\n- x") is None


def test_composable_memory_budget_applies_to_get_context():
    mem = ComposableMemory([StaticBlock("pinned instructions for every turn")], max_memory_tokens=3)
    mem.add_message(UserMessage("hello there"))
    assert [m.content for m in mem.get_context("hi")] == ["hello there"]


def test_bad_budgets_are_refused(store):
    with pytest.raises(InvalidValueError, match="max_memory_tokens"):
        Memory(location=store, max_memory_tokens=0)
    with pytest.raises(InvalidTypeError, match="max_memory_tokens"):
        Memory(location=store, max_memory_tokens="500")  # type: ignore[arg-type]
    with pytest.raises(InvalidTypeError, match="max_memory_tokens"):
        ComposableMemory(max_memory_tokens=True)  # type: ignore[arg-type]


def test_the_budget_applies_to_async_runs_too(store):
    mem = memory(store, max_memory_tokens=1)
    llm = CannedLLM(["Noted."] * 3)
    agent = Agent("a", llm, memory=mem)
    asyncio.run(agent.arun(OLD_TURN))
    asyncio.run(agent.arun("the weather is grey today"))
    asyncio.run(agent.arun("what is my locker number?"))
    assert [m.role for m in llm.calls[-1]] == ["user", "assistant", "user"]
