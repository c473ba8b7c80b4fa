"""The agent runtime: tools, middleware, run/arun/astream parity, loop safety."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

import pytest

from fastaiagent import Agent, AgentMemory, ComposableMemory, RunContext
from fastaiagent.agent import MemoryBlock, RedactPII, StreamDelta
from fastaiagent.agent.tools import FunctionTool
from fastaiagent.llm.message import SystemMessage
from fastaiagent.testing import CannedLLM, FunctionLLM, tool_call


def get_weather(city: str, unit: str = "C") -> str:
    """Current weather for a city."""
    return f"18{unit} in {city}"


def test_tool_schema_comes_from_type_hints():
    spec = FunctionTool(get_weather).spec
    assert spec.name == "get_weather"
    assert spec.description == "Current weather for a city."
    assert spec.parameters == {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "default": "C"}},
        "required": ["city"],
        "additionalProperties": False,
    }


def test_tool_loop_calls_tools_and_stores_only_the_final_reply():
    llm = CannedLLM([
        tool_call("get_weather", city="Paris"),
        "It is 18C in Paris.",
    ])
    memory = AgentMemory()
    agent = Agent(name="w", llm=llm, tools=[get_weather], memory=memory)
    result = agent.run("Weather in Paris?")
    assert result.output == "It is 18C in Paris."
    assert result.tool_calls == [{"name": "get_weather", "arguments": {"city": "Paris"}, "output": "18C in Paris"}]
    assert [(m.role, m.content) for m in memory.get_messages()] == [
        ("user", "Weather in Paris?"),
        ("assistant", "It is 18C in Paris."),
    ]
    tool_result = llm.calls[1][-1]
    assert tool_result.role == "tool" and tool_result.content == "18C in Paris"


def test_text_before_a_tool_call_is_not_stored():
    from fastaiagent.llm.base import LLMResponse

    llm = CannedLLM([
        LLMResponse(content="Let me check...", tool_calls=[tool_call("get_weather", city="Oslo")]),
        "Cold.",
    ])
    memory = AgentMemory()
    Agent(name="w", llm=llm, tools=[get_weather], memory=memory).run("Oslo?")
    assert [m.content for m in memory.get_messages()] == ["Oslo?", "Cold."]


def test_tool_errors_go_back_to_the_model_and_loop_is_bounded():
    def broken(x: int) -> int:
        raise ValueError("bad x")

    llm = CannedLLM([tool_call("broken", x=1), "recovered"])
    result = Agent(name="t", llm=llm, tools=[broken]).run("go")
    assert result.output == "recovered"
    assert "ValueError: bad x" in result.tool_calls[0]["output"]

    looping = CannedLLM(tool_call("broken", x=1))
    stuck = Agent(name="t", llm=looping, tools=[broken], max_tool_rounds=3).run("go")
    assert stuck.status == "max_tool_rounds" and looping.call_count == 3


def test_tools_receive_the_run_context():
    @dataclass
    class Session:
        user_id: str

    def whoami(context: RunContext) -> str:
        return context.state.user_id

    llm = CannedLLM([tool_call("whoami"), "done"])
    result = Agent(name="t", llm=llm, tools=[whoami]).run("?", context=RunContext(state=Session("alice")))
    assert result.tool_calls[0]["output"] == "alice"


def test_redact_pii_masks_reply_and_memory_stores_the_redacted_reply():
    reply = (
        "Mail bob@example.com, call +1 415-555-0132, card 4111 1111 1111 1111, "
        "IBAN GB82 WEST 1234 5698 7654 32, order 12345."
    )
    memory = AgentMemory()
    agent = Agent(name="r", llm=CannedLLM(reply), memory=memory, middleware=[RedactPII()])
    result = agent.run("my email is me@example.org")
    assert result.output == "Mail [EMAIL], call [PHONE], card [CARD], IBAN [IBAN], order 12345."
    stored = memory.get_messages()
    assert stored[0].content == "my email is me@example.org"  # the user's words as said
    assert stored[1].content == result.output


def test_redact_pii_leaves_non_identifiers_alone():
    text = "Invoice 2026-04-18, total 1234.56, card 1234 5678 9012 3456 fails Luhn"
    assert RedactPII.redact(text) == text


def test_redact_pii_finds_an_address_after_a_long_run_of_near_misses():
    """A reply of 64k address characters without "@" is read in one pass (each
    address is looked for where its run of characters starts), and the address
    after it is still masked, with any leading punctuation of its run."""
    near_misses = "1." * 32_000
    assert RedactPII.redact(near_misses + " then mail -me@x.io") == near_misses + " then mail [EMAIL]"


def test_redact_input_masks_what_the_model_sees():
    llm = FunctionLLM(lambda ms: ms[-1].content or "")
    result = Agent(name="r", llm=llm, middleware=[RedactPII(redact_input=True)]).run("I am x@y.io")
    assert result.output == "I am [EMAIL]"


def test_run_arun_and_astream_return_and_store_the_same():
    def make():
        llm = CannedLLM([tool_call("get_weather", city="Rome"), "Sunny, write to a@b.co"])
        memory = AgentMemory()
        return Agent(name="p", llm=llm, tools=[get_weather], memory=memory, middleware=[RedactPII()]), memory

    agent, sync_memory = make()
    sync = agent.run("Rome?")
    agent, async_memory = make()
    asynchronous = asyncio.run(agent.arun("Rome?"))

    async def collect():
        agent, memory = make()
        deltas, final = [], None
        async for event in agent.astream("Rome?"):
            if isinstance(event, StreamDelta):
                deltas.append(event.text)
            else:
                final = event
        return deltas, final, memory

    deltas, streamed, stream_memory = asyncio.run(collect())
    assert sync.output == asynchronous.output == streamed.output == "Sunny, write to [EMAIL]"
    assert "".join(deltas) == "Sunny, write to a@b.co"  # raw deltas; the result is after middleware
    dumps = [[m.to_dict() for m in mem.get_messages()] for mem in (sync_memory, async_memory, stream_memory)]
    assert dumps[0] == dumps[1] == dumps[2]


def test_resume_records_the_question_it_resumed():
    def slow_tool() -> str:
        return "partial"

    llm = CannedLLM([tool_call("slow_tool"), tool_call("slow_tool"), "final answer"])
    memory = AgentMemory()
    agent = Agent(name="r", llm=llm, tools=[slow_tool], memory=memory, max_tool_rounds=2)
    first = agent.run("original question")
    assert first.status == "max_tool_rounds" and len(memory) == 0
    resumed = agent.resume(first)
    assert resumed.output == "final answer"
    assert [m.content for m in memory.get_messages()] == ["original question", "final answer"]


def test_fork_continues_a_conversation_with_a_new_question():
    llm = FunctionLLM(lambda ms: f"{len(ms)} messages")
    memory = AgentMemory()
    agent = Agent(name="f", llm=llm, memory=memory)
    first = agent.run("one")
    forked = agent.fork(first, "two")
    assert [m.content for m in memory.get_messages()][-2:] == ["two", forked.output]


def test_to_dict_marks_memory_only_when_configured():
    llm = CannedLLM("x")
    assert "memory_enabled" not in Agent(name="a", llm=llm).to_dict()
    assert Agent(name="a", llm=llm, memory=AgentMemory()).to_dict()["memory_enabled"] is True
    assert Agent(name="a", llm=llm, memory=ComposableMemory()).to_dict()["memory_enabled"] is True


def test_bad_agent_arguments_fail_clearly():
    with pytest.raises(TypeError, match="llm must be an LLMClient or BaseLLM, got str"):
        Agent(name="a", llm="gpt-4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name cannot be empty"):
        Agent(name="", llm=CannedLLM("x"))
    with pytest.raises(TypeError, match="memory must be Memory, AgentMemory or ComposableMemory"):
        Agent(name="a", llm=CannedLLM("x"), memory=["not memory"])


class BlockingIOBlock(MemoryBlock):
    """A block doing blocking I/O in render and on_message: each call blocks its
    thread until the event loop has run a callback meanwhile (up to 10 s). Run on
    the loop's own thread, the callback could not run before the wait ends."""

    name = "blocking"

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_ran: list[bool] = []  # per call: did the loop run while it blocked?

    def _block(self) -> None:
        assert self.loop is not None
        answered = threading.Event()
        self.loop.call_soon_threadsafe(answered.set)
        self.loop_ran.append(answered.wait(10))

    def on_message(self, message):
        self._block()

    def render(self, query):
        self._block()
        return [SystemMessage("slow fact")]


@pytest.mark.parametrize("mode", ["arun", "astream"])
def test_async_runs_never_block_the_event_loop(mode):
    block = BlockingIOBlock()
    agent = Agent(name="s", llm=CannedLLM("ok"), memory=ComposableMemory(blocks=[block]))

    async def main():
        block.loop = asyncio.get_running_loop()
        if mode == "arun":
            await agent.arun("hi")
        else:
            async for _ in agent.astream("hi"):
                pass

    asyncio.run(main())
    assert len(block.loop_ran) >= 2  # the render and at least one message
    assert all(block.loop_ran), block.loop_ran  # the loop went on while each call blocked


def test_a_canned_llm_out_of_replies_says_how_to_fix_it():
    from fastaiagent.errors import UsageError
    from fastaiagent.llm.message import UserMessage

    llm = CannedLLM("only one", repeat_last=False)
    llm.complete([UserMessage("a")])
    with pytest.raises(UsageError, match="CannedLLM ran out of replies: give it one reply per"):
        llm.complete([UserMessage("b")])
