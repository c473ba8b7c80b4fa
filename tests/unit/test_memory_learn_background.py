"""learn= runs after the reply, flush waits for it, forget is never undone by it."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from _wait import wait_until
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
    release = threading.Event()
    llm, stats = _slow_extractor(0.0, {"alice": release})
    mem = Memory(user_id=lambda c: c.state.user_id, learn=llm)
    agent = Agent(name="a", llm=CannedLLM("noted"), memory=mem)
    try:
        agent.run("I am alice and I have a cat named Tom", context=RunContext(state=Session("alice")))
        # The reply came back while the extraction is still held: it never waited for it.
        assert wait_until(lambda: stats["now"] == 1, "the extraction starts")
        assert mem.flush(timeout=0) is False
    finally:
        release.set()
    assert mem.flush(timeout=10) is True
    facts = mem.retrieve(tier="user", id="alice")
    assert [(f.fact, f.confidence, f.source) for f in facts] == [("Likes tea", 0.6, "learned")]


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


def _slow_extractor(
    latency: float, held: dict[str, threading.Event], together: int = 0
) -> tuple[FunctionLLM, dict[str, int]]:
    """An extractor whose call takes ``latency`` seconds (an Event nobody sets
    stands in for the model), or until ``held[user]`` is set for a held user.
    ``together``: a call first waits (up to 30 s) until that many run at once."""
    lock = threading.Lock()
    stats = {"now": 0, "most": 0, "calls": 0}
    crowd = threading.Event()

    def reply(messages):
        said = messages[-1].content or ""
        with lock:
            stats["now"] += 1
            stats["most"] = max(stats["most"], stats["now"])
            if stats["now"] >= together:
                crowd.set()
        try:
            user = next((u for u in held if f"I am {u}" in said), None)
            if user is not None:
                held[user].wait(60)
            else:
                crowd.wait(30)
                threading.Event().wait(latency)
        finally:
            with lock:
                stats["now"] -= 1
                stats["calls"] += 1
        return '{"facts": [{"fact": "Likes tea", "replaces": null}]}'

    return FunctionLLM(reply), stats


def test_twelve_users_learn_in_parallel_each_in_order():
    # Each extraction waits until four run at once: four lanes do at once, one
    # worker would wait out each 30 s (and the count would say 1).
    llm, stats = _slow_extractor(0.0, {}, together=4)
    mem = Memory(user_id=lambda c: c.state.user_id, learn=llm)
    agent = Agent(name="a", llm=CannedLLM("noted"), memory=mem)
    for i in range(12):
        agent.run("I like tea", context=RunContext(state=Session(f"user{i}")))
    assert mem.flush(timeout=60) is True
    assert stats["most"] == 4  # four lanes, never more
    assert stats["calls"] == 12
    assert all(mem.retrieve(tier="user", id=f"user{i}") for i in range(12))


def test_forget_does_not_wait_for_another_users_slow_learning():
    release_bob = threading.Event()
    llm, stats = _slow_extractor(0.0, {"bob": release_bob})
    mem = Memory(user_id=lambda c: c.state.user_id, learn=llm)
    agent = Agent(name="a", llm=CannedLLM("noted"), memory=mem)
    agent.run("I am bob and I like tea", context=RunContext(state=Session("bob")))
    agent.run("I am alice and I like tea", context=RunContext(state=Session("alice")))
    try:
        assert wait_until(lambda: stats["now"] == 1, "bob's extraction starts")
        mem.forget(tier="user", id="alice")
        assert stats["now"] == 1  # bob's extraction is still held: the forget did not wait for it
        assert mem.retrieve(tier="user", id="alice") == []
        assert mem.flush(timeout=0) is False  # bob's work is still queued
    finally:
        release_bob.set()
    assert mem.flush(timeout=10) is True
    assert [f.fact for f in mem.retrieve(tier="user", id="bob")] == ["Likes tea"]
