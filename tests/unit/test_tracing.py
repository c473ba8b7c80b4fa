"""Tracing: the memory spans, their attributes, and what tracing off changes (nothing)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from fastaiagent import Agent, Memory, RunContext, trace
from fastaiagent.agent import ComposableMemory, MemoryBlock, StaticBlock
from fastaiagent.agent.memory_blocks.base import MAX_SNIPPETS, SNIPPET_CHARS
from fastaiagent.learn import MemoryStore
from fastaiagent.llm.message import Message, SystemMessage
from fastaiagent.testing import CannedLLM, FunctionLLM


@pytest.fixture(autouse=True)
def _tracing_off_after():
    yield
    trace.shutdown()
    trace.set_redaction_policy(None)


class ManyBlock(MemoryBlock):
    """Renders more and longer messages than a span may carry."""

    name = "many"

    def render(self, query: str) -> list[Message]:
        return [SystemMessage(f"item {i} " + "x" * 500) for i in range(MAX_SNIPPETS + 5)]


class CountingBlock(MemoryBlock):
    name = "counting"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_message(self, message: Message) -> None:
        self.seen.append(message.content or "")


class FlakyBlock(MemoryBlock):
    """Renders once, then raises on every later render."""

    name = "flaky"

    def __init__(self) -> None:
        self.renders = 0

    def render(self, query: str) -> list[Message]:
        self.renders += 1
        if self.renders > 1:
            raise RuntimeError("backend down")
        return [SystemMessage("first render only")]


def _agent(*blocks: MemoryBlock, reply: str = "done") -> Agent:
    return Agent("tracer", CannedLLM(reply), memory=ComposableMemory(list(blocks)))


def test_one_memory_read_span_per_turn_with_its_attributes():
    agent = _agent(StaticBlock("The sky is blue"), CountingBlock())
    with trace.capture() as spans:
        agent.run("what colour is the sky?")
        agent.run("and the grass?")
    reads = spans.named("memory.read")
    assert len(reads) == 2
    first, second = reads
    assert first.attributes["memory.block_count"] == 2
    assert first.attributes["memory.query"] == "what colour is the sky?"
    assert first.attributes["memory.message_count"] == 1  # the static fact; window empty
    assert second.attributes["memory.message_count"] == 3  # + the first turn's two messages
    run = spans.named("agent.run")[0]
    assert first.parent_id == run.span_id and first.trace_id == run.trace_id


def test_each_rendering_block_gets_a_child_span_with_bounded_snippets():
    agent = _agent(StaticBlock("Pinned fact"), ManyBlock())
    with trace.capture() as spans:
        agent.run("hi")
    read = spans.named("memory.read")[0]
    children = {s.name: s for s in spans.children(read)}
    assert set(children) == {"memory.read.static", "memory.read.many"}
    static = children["memory.read.static"].attributes
    assert static["memory.rendered_count"] == 1
    assert static["memory.snippets"] == ["Pinned fact"]
    many = children["memory.read.many"].attributes
    assert many["memory.rendered_count"] == MAX_SNIPPETS + 5
    assert len(many["memory.snippets"]) == MAX_SNIPPETS
    assert all(len(s) <= SNIPPET_CHARS for s in many["memory.snippets"])


def test_each_stored_message_emits_a_write_span_with_block_children():
    agent = _agent(StaticBlock("Pinned"), CountingBlock())
    with trace.capture() as spans:
        agent.run("remember this")
    writes = spans.named("memory.write")
    assert [w.attributes["memory.role"] for w in writes] == ["user", "assistant"]
    for write in writes:
        kids = {k.name: k.attributes for k in spans.children(write)}
        assert set(kids) == {"memory.write.static", "memory.write.counting"}
        assert kids["memory.write.static"]["memory.action"] == "noop"
        assert kids["memory.write.counting"]["memory.action"] == "stored"
        assert all("memory.detail" in attrs for attrs in kids.values())


def test_async_runs_nest_memory_spans_under_the_agent_span():
    agent = _agent(StaticBlock("Pinned"), CountingBlock())
    with trace.capture() as spans:
        asyncio.run(agent.arun("async hello"))
    run = spans.named("agent.run")[0]
    read = spans.named("memory.read")[0]
    assert read.parent_id == run.span_id
    assert [w.parent_id for w in spans.named("memory.write")] == [run.span_id, run.span_id]


def test_direct_verbs_emit_their_spans(tmp_path):
    mem = Memory(location=MemoryStore(tmp_path / "facts.db"), agent_id="support")
    with trace.capture() as spans:
        mem.persist("Prefers email", tier="user", id="alice")
        facts = mem.retrieve(tier="user", id="alice")
        mem.update("Prefers Slack", old="Prefers email", tier="user", id="alice")
        mem.forget(tier="user", id="alice")
    assert len(facts) == 1
    names = spans.names()
    for verb in ("persist", "retrieve", "update", "forget"):
        assert f"memory.{verb}" in names
    retrieve = spans.named("memory.retrieve")[0].attributes
    assert retrieve["memory.count"] == 1
    assert retrieve["memory.scope"] == "user" and retrieve["memory.scope_id"] == "alice"
    assert spans.named("memory.forget")[0].attributes["memory.count"] == 2  # fact + history


@dataclass
class Session:
    user_id: str


def test_memory_front_door_names_global_and_user_fact_spans(tmp_path):
    mem = Memory(
        location=MemoryStore(tmp_path / "facts.db"),
        agent_id="assistant",
        user_id=lambda ctx: ctx.state.user_id,
    )
    mem.persist("Return policy is 30 days", tier="global")
    mem.persist("Has a beagle named Biscuit", tier="user", id="alice")
    agent = Agent("assistant", CannedLLM("ok"), memory=mem)
    with trace.capture() as spans:
        agent.run("hello", context=RunContext(state=Session("alice")))
    names = spans.names()
    assert "memory.read.persistent_facts" in names
    assert "memory.read.persistent_facts.user" in names
    user_read = spans.named("memory.read.persistent_facts.user")[0].attributes
    assert user_read["memory.snippets"] and "Biscuit" in user_read["memory.snippets"][0]


def _learning_run(traced: bool, tmp_path) -> tuple[list[str], int, list[list[str]]]:
    calls = {"n": 0}

    def model(messages: list[Message]) -> str:
        calls["n"] += 1
        if "durable facts" in (messages[0].content or ""):
            return '{"facts": [{"fact": "Has a cat named Tom", "replaces": null}]}'
        if any("summar" in (m.content or "").lower() for m in messages[:1]):
            return "The user has a cat."
        return "noted"

    llm = FunctionLLM(model)
    mem = Memory(
        location=MemoryStore(tmp_path / f"facts-{traced}.db"),
        user_id=lambda ctx: ctx.state.user_id,
        learn=llm,
        summarize=llm,
        window=2,
    )
    agent = Agent("assistant", llm, memory=mem)
    outputs = []
    if traced:
        trace.setup(store_path=tmp_path / "traces.db")
    try:
        for text in ("I have a cat named Tom", "What is my cat called?", "Thanks", "Bye now"):
            outputs.append(agent.run(text, context=RunContext(state=Session("u1"))).output)
            mem.flush()  # learning runs after the reply; settle it so both runs see the same state
    finally:
        trace.shutdown()
    prompts = [[m.content or "" for m in call] for call in llm.calls if "durable" not in (call[0].content or "")]
    return outputs, calls["n"], prompts


def test_tracing_off_changes_nothing_and_makes_no_extra_calls(tmp_path):
    off = _learning_run(False, tmp_path)
    on = _learning_run(True, tmp_path)
    assert off[0] == on[0]
    assert off[1] == on[1] > len(off[0])  # same LLM calls, memory ones included
    assert off[2] == on[2]  # the model saw the same prompts


def test_tracing_off_is_a_shared_no_op():
    assert not trace.is_enabled()
    assert trace.span("memory.read") is trace.span("agent.run")
    with trace.span("x", {"a": 1}) as s:
        assert s is None
    trace.annotate({"a": 1})  # nothing to annotate; no error
    assert trace.current_trace_id() is None
    assert _agent(StaticBlock("x")).run("hi").trace_id is None


def test_a_failing_block_is_not_reported_with_its_previous_render():
    agent = _agent(FlakyBlock())
    with trace.capture() as spans:
        agent.run("first")
        agent.run("second")
    first, second = spans.named("memory.read.flaky")
    assert first.attributes["memory.rendered_count"] == 1
    assert "memory.error" not in first.attributes
    assert second.attributes["memory.error"] == "backend down"
    assert "memory.rendered_count" not in second.attributes
    assert "memory.snippets" not in second.attributes
    assert second.status == "ERROR" or any(e["name"] == "exception" for e in second.events)


def test_unresolved_callers_writes_are_not_traced_as_writes(tmp_path):
    mem = Memory(location=MemoryStore(tmp_path / "facts.db"), user_id=lambda ctx: None)
    agent = Agent("assistant", CannedLLM("ok"), memory=mem)
    with trace.capture() as spans:
        agent.run("My name is Zed", context=RunContext(state=None))
    assert spans.named("agent.run")
    assert not [n for n in spans.names() if n.startswith("memory.write")]
