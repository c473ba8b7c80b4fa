"""ComposableMemory's async write path: the turn lock survives cancelled turns."""

from __future__ import annotations

import asyncio
import contextlib

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
