"""learn= runs after the reply, flush waits for it, forget is never undone by it."""

from __future__ import annotations

import time
from dataclasses import dataclass

from fastaiagent import Agent, Memory, RunContext
from fastaiagent.testing import CannedLLM, FunctionLLM


@dataclass
class Session:
    user_id: str


def extractor(delay: float = 0.0) -> FunctionLLM:
    def reply(messages):
        said = messages[-1].content or ""
        if "cat" in said:
            return '{"facts": [{"fact": "Has a cat named Tom", "replaces": null}]}'
        return '{"facts": []}'

    return FunctionLLM(reply, delay=delay)


def test_learning_does_not_delay_the_reply_and_flush_waits_for_it():
    mem = Memory(user_id=lambda c: c.state.user_id, learn=extractor(delay=0.5))
    agent = Agent(name="a", llm=CannedLLM("noted"), memory=mem)
    start = time.perf_counter()
    agent.run("I have a cat named Tom", context=RunContext(state=Session("alice")))
    assert time.perf_counter() - start < 0.4
    assert mem.flush(timeout=10) is True
    facts = mem.retrieve(tier="user", id="alice")
    assert [(f.fact, f.confidence, f.source) for f in facts] == [("Has a cat named Tom", 0.6, "learned")]


def test_inline_learning_when_background_is_off():
    mem = Memory(user_id="alice", learn=extractor(), learn_in_background=False)
    Agent(name="a", llm=CannedLLM("noted"), memory=mem).run("I have a cat named Tom")
    assert [f.fact for f in mem.retrieve(tier="user", id="alice")] == ["Has a cat named Tom"]


def test_forget_waits_for_queued_learning_so_nothing_comes_back():
    mem = Memory(user_id=lambda c: c.state.user_id, learn=extractor(delay=0.3))
    agent = Agent(name="a", llm=CannedLLM("noted"), memory=mem)
    agent.run("I have a cat named Tom", context=RunContext(state=Session("alice")))
    assert mem.forget(tier="user", id="alice") == 1
    mem.flush(timeout=10)
    assert mem.retrieve(tier="user", id="alice") == []


def test_async_flush():
    import asyncio

    mem = Memory(user_id=lambda c: c.state.user_id, learn=extractor(delay=0.2))
    agent = Agent(name="a", llm=CannedLLM("noted"), memory=mem)

    async def main():
        await agent.arun("my cat is Tom", context=RunContext(state=Session("bob")))
        assert await mem.aflush(timeout=10)

    asyncio.run(main())
    assert [f.fact for f in mem.retrieve(tier="user", id="bob")] == ["Has a cat named Tom"]
