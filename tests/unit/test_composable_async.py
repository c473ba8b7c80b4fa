"""ComposableMemory's async write path: the turn lock survives cancelled turns."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest

from fastaiagent.agent import AgentMemory, ComposableMemory, MemoryBlock
from fastaiagent.llm.message import Message, UserMessage


class NativeAsyncBlock(MemoryBlock):
    """A block with a native aon_message, so arecord takes the turn lock itself."""

    name = "native"

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def aon_message(self, message: Message) -> None:
        self.seen.append(message.content or "")


def test_a_turn_cancelled_while_waiting_for_the_lock_never_keeps_it() -> None:
    block = NativeAsyncBlock()
    memory = ComposableMemory(blocks=[block], primary=AgentMemory(max_messages=10))
    lock = memory._record_lock
    lock.acquire()  # another turn of the same user is being recorded

    async def scenario() -> None:
        task = asyncio.create_task(memory.arecord([UserMessage("cancelled turn")]))
        await asyncio.sleep(0)  # the task runs up to its wait for the lock
        assert not task.done()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        lock.release()  # the other turn ends; the cancelled waiter's thread takes and frees it
        acquired = await asyncio.to_thread(lock.acquire, True, 2)
        assert acquired, "a cancelled turn left the user's memory locked"
        lock.release()
        await memory.arecord([UserMessage("next turn")])

    asyncio.run(scenario())
    assert block.seen == ["next turn"]
    assert [m.content for m in memory.primary.get_messages()] == ["next turn"]


def test_concurrent_async_turns_never_interleave() -> None:
    block = NativeAsyncBlock()
    memory = ComposableMemory(blocks=[block], primary=AgentMemory(max_messages=100))

    async def scenario() -> None:
        await asyncio.gather(
            *(memory.arecord([UserMessage(f"q{i}"), UserMessage(f"a{i}")]) for i in range(20))
        )

    asyncio.run(scenario())
    contents = [m.content or "" for m in memory.primary.get_messages()]
    pairs = list(zip(contents[::2], contents[1::2], strict=True))
    assert all(q[1:] == a[1:] for q, a in pairs) and len(pairs) == 20


@pytest.mark.timeout(30)  # a leaked lock would hang the loop's shutdown: fail instead
def test_a_cancelled_arun_leaves_the_users_memory_usable() -> None:
    from fastaiagent import Agent
    from fastaiagent.testing import CannedLLM

    class SlowWriteBlock(MemoryBlock):
        """Holds the first turn's write open until the test lets it go."""

        name = "slow"

        def __init__(self) -> None:
            self.release = asyncio.Event()
            self.seen: list[str] = []

        async def aon_message(self, message: Message) -> None:
            if message.content == "first":
                await self.release.wait()
            self.seen.append(message.content or "")

    class WatchedLock:
        """The turn lock, telling the test when a second turn starts waiting for it."""

        def __init__(self) -> None:
            self._lock = threading.Lock()
            self.contended = threading.Event()

        def acquire(self, *args: object) -> bool:
            if self._lock.locked():
                self.contended.set()
            return self._lock.acquire(*args)  # type: ignore[arg-type]

        def release(self) -> None:
            self._lock.release()

    block = SlowWriteBlock()
    memory = ComposableMemory(blocks=[block])
    lock = memory._record_lock = WatchedLock()  # type: ignore[assignment]
    agent = Agent(name="a", llm=CannedLLM("ok"), memory=memory)

    async def scenario() -> None:
        first = asyncio.create_task(agent.arun("first"))
        while "first" not in [m.content for m in agent.memory.primary.get_messages()]:  # type: ignore[union-attr]
            await asyncio.sleep(0)
        second = asyncio.create_task(agent.arun("second"))
        assert await asyncio.to_thread(lock.contended.wait, 5)  # second waits for the lock
        second.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await second
        block.release.set()
        await first
        third = await asyncio.wait_for(agent.arun("third"), timeout=5)
        assert third.output == "ok"

    asyncio.run(scenario())
    assert "third" in block.seen and "second" not in block.seen
