"""learn= runs after the reply, flush waits for it, forget is never undone by it."""

from __future__ import annotations

import threading
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


# -- learning scales with users -------------------------------------------------


def _slow_extractor(latency: float, held: dict[str, threading.Event]) -> tuple[FunctionLLM, dict[str, int]]:
    """An extractor whose call takes ``latency`` seconds (an Event nobody sets
    stands in for the model), or until ``held[user]`` is set for a held user."""
    lock = threading.Lock()
    stats = {"now": 0, "most": 0, "calls": 0}

    def reply(messages):
        said = messages[-1].content or ""
        with lock:
            stats["now"] += 1
            stats["most"] = max(stats["most"], stats["now"])
        try:
            user = next((u for u in held if f"I am {u}" in said), None)
            if user is not None:
                held[user].wait(30)
            else:
                threading.Event().wait(latency)
        finally:
            with lock:
                stats["now"] -= 1
                stats["calls"] += 1
        return '{"facts": [{"fact": "Likes tea", "replaces": null}]}'

    return FunctionLLM(reply), stats


def test_twelve_users_learn_in_parallel_each_in_order():
    llm, stats = _slow_extractor(0.5, {})
    mem = Memory(user_id=lambda c: c.state.user_id, learn=llm)
    agent = Agent(name="a", llm=CannedLLM("noted"), memory=mem)
    start = time.perf_counter()
    for i in range(12):
        agent.run("I like tea", context=RunContext(state=Session(f"user{i}")))
    assert mem.flush(timeout=30) is True
    elapsed = time.perf_counter() - start
    # One worker took 12 x 0.5 s = 6 s; four lanes at once take about 1.5 s.
    assert elapsed < 3.5, f"12 extractions took {elapsed:.2f}s"
    assert stats["most"] == 4
    assert stats["calls"] == 12
    assert all(mem.retrieve(tier="user", id=f"user{i}") for i in range(12))


def test_forget_does_not_wait_for_another_users_slow_learning():
    release_bob = threading.Event()
    llm, _ = _slow_extractor(0.0, {"bob": release_bob})
    mem = Memory(user_id=lambda c: c.state.user_id, learn=llm)
    agent = Agent(name="a", llm=CannedLLM("noted"), memory=mem)
    agent.run("I am bob and I like tea", context=RunContext(state=Session("bob")))
    agent.run("I am alice and I like tea", context=RunContext(state=Session("alice")))
    try:
        start = time.perf_counter()
        mem.forget(tier="user", id="alice")
        assert time.perf_counter() - start < 5  # bob's extraction is held for 30 s
        assert mem.retrieve(tier="user", id="alice") == []
        assert mem.flush(timeout=0) is False  # bob's work is still queued
    finally:
        release_bob.set()
    assert mem.flush(timeout=10) is True
    assert [f.fact for f in mem.retrieve(tier="user", id="bob")] == ["Likes tea"]
