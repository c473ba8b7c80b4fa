"""SummaryBlock: rolling summary of older turns (acceptance 103, 104, H9, H10)."""

from __future__ import annotations

import asyncio
import json
import logging
import re

import pytest

from fastaiagent import trace
from fastaiagent.agent import Agent, AgentMemory, ComposableMemory
from fastaiagent.agent.memory_blocks.summary import (
    SummaryBlock,
    cut_summary,
    render_summary,
)
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.llm.base import BaseLLM, LLMResponse
from fastaiagent.llm.message import AssistantMessage, Message, UserMessage
from fastaiagent.testing import CannedLLM, FunctionLLM, echo_llm

_LINE = re.compile(r"^(user|assistant): (m\d+)", re.MULTILINE)


def summarised_ids(call: list[Message]) -> list[str]:
    """The message ids (m1, m2 ...) a summary prompt asked the model to fold in."""
    return [m for _, m in _LINE.findall(call[-1].content or "")]


def conversation(n: int) -> list[Message]:
    return [
        UserMessage(f"m{i} question") if i % 2 else AssistantMessage(f"m{i} answer")
        for i in range(1, n + 1)
    ]


def summarizer() -> FunctionLLM:
    """Answers with the ids it was asked to summarise, appended to the previous summary."""

    def reply(messages: list[Message]) -> str:
        body = messages[-1].content or ""
        previous = body.split("Previous summary:\n", 1)[1].split("\n\n", 1)[0]
        ids = [m for _, m in _LINE.findall(body)]
        base = "" if previous == "(none yet)" else previous + " "
        return base + " ".join(ids)

    return FunctionLLM(reply)


def feed(block: SummaryBlock, messages: list[Message]) -> None:
    for message in messages:
        block.on_message(message)


# -- cadence and coverage (acceptance 103, H10) ---------------------------------


def test_refreshes_every_summarize_every_messages_covering_everything_older_than_keep_last():
    llm = summarizer()
    block = SummaryBlock(llm, keep_last=4, summarize_every=2)
    feed(block, conversation(4))
    assert llm.call_count == 0 and block.render("q") == []  # nothing is older than keep_last
    feed(block, conversation(12)[4:6])
    assert llm.call_count == 1
    assert summarised_ids(llm.calls[0]) == ["m1", "m2"]
    feed(block, conversation(12)[6:12])
    assert llm.call_count == 4
    # After 12 messages, everything but the last 4 is summarised, in order.
    assert block.summary == "m1 m2 m3 m4 m5 m6 m7 m8"
    assert block.render("q")[0].content == render_summary(block.summary)


def test_spec_defaults_first_refresh_after_fifteen_messages():
    llm = summarizer()
    block = SummaryBlock(llm)  # keep_last=10, summarize_every=5
    feed(block, conversation(14))
    assert llm.call_count == 0
    feed(block, conversation(15)[14:])
    assert llm.call_count == 1
    assert summarised_ids(llm.calls[0]) == ["m1", "m2", "m3", "m4", "m5"]


def test_summary_never_covers_messages_still_in_the_window():
    """Acceptance H10: at every refresh, none of the last keep_last messages is in the prompt."""
    llm = summarizer()
    keep_last = 6
    block = SummaryBlock(llm, keep_last=keep_last, summarize_every=3)
    messages = conversation(90)
    for i, message in enumerate(messages, start=1):
        before = llm.call_count
        block.on_message(message)
        if llm.call_count > before:
            window = {f"m{j}" for j in range(i - keep_last + 1, i + 1)}
            assert not window & set(summarised_ids(llm.calls[-1]))
    covered = block.summary.split()
    assert covered == [f"m{j}" for j in range(1, len(covered) + 1)]
    assert int(covered[-1][1:]) <= 90 - keep_last


# -- bounded input (acceptance H9) -------------------------------------------------


def test_each_refresh_sees_the_previous_summary_plus_only_new_messages():
    llm = CannedLLM("running summary")
    block = SummaryBlock(llm, keep_last=10, summarize_every=5)
    feed(block, conversation(500))
    assert llm.call_count == (500 - 10) // 5
    sizes = set()
    for call in llm.calls[1:]:
        body = call[-1].content or ""
        assert "Previous summary:\nrunning summary" in body
        assert len(_LINE.findall(body)) == 5
        sizes.add(len(body))
    assert max(sizes) < 400  # the prompt does not grow with the conversation


def test_long_messages_are_cut_in_the_prompt():
    llm = CannedLLM("s")
    block = SummaryBlock(llm, keep_last=1, summarize_every=1)
    feed(block, [UserMessage("a" * 50_000), UserMessage("b")])
    assert len(llm.calls[0][-1].content or "") < 3_000


def test_state_stays_bounded_when_the_llm_keeps_failing(caplog):
    block = SummaryBlock(CannedLLM(RuntimeError("down")), keep_last=10, summarize_every=5)
    with caplog.at_level(logging.WARNING, logger="fastaiagent.memory"):
        feed(block, conversation(1_000))
    assert len(block._pending) <= block.max_pending
    assert len(block._recent) == 10
    assert block.summary == ""
    assert "dropping the oldest" in caplog.text


# -- max_chars (acceptance 104) ----------------------------------------------------


def test_long_summary_is_cut_to_max_chars_and_the_llm_is_asked_to_stay_under():
    llm = CannedLLM("word " * 500)
    block = SummaryBlock(llm, keep_last=2, summarize_every=1, max_chars=100)
    feed(block, conversation(3))
    assert 0 < len(block.summary) <= 100
    assert "under 100 characters" in (llm.calls[0][0].content or "")


@pytest.mark.parametrize("text", ["x" * 300, "short words " * 40, "  padded  "])
def test_cut_summary_respects_the_limit(text):
    cut = cut_summary(text, 120)
    assert len(cut) <= 120 and cut == cut.strip()


# -- failures ---------------------------------------------------------------------


@pytest.mark.parametrize("bad", [RuntimeError("boom"), TimeoutError("slow"), "", "   "])
def test_failed_or_empty_refresh_keeps_the_state_and_retries_later(bad, caplog):
    llm = CannedLLM([bad, "recovered summary"])
    block = SummaryBlock(llm, keep_last=2, summarize_every=1)
    with caplog.at_level(logging.WARNING, logger="fastaiagent.memory"):
        feed(block, conversation(3))
    assert block.summary == ""
    assert "SummaryBlock" in caplog.text
    feed(block, conversation(4)[3:])
    assert block.summary == "recovered summary"
    # The retry folded in the message the failed call could not.
    assert summarised_ids(llm.calls[1]) == ["m1", "m2"]


def test_block_failure_never_breaks_an_agent_run():
    block = SummaryBlock(CannedLLM(RuntimeError("down")), keep_last=1, summarize_every=1)
    agent = Agent("a", echo_llm(), memory=ComposableMemory(blocks=[block]))
    for i in range(3):
        assert agent.run(f"hello {i}").output == f"You said: hello {i}"


# -- rendering in an agent --------------------------------------------------------------


def test_agent_prompt_carries_the_summary_before_the_window():
    model_calls: list[list[Message]] = []

    def answer(messages: list[Message]) -> str:
        model_calls.append(messages)
        return "noted"

    block = SummaryBlock(CannedLLM("The user introduced themselves as Ada."), keep_last=4,
                         summarize_every=2)
    agent = Agent("a", FunctionLLM(answer),
                  memory=ComposableMemory(blocks=[block], primary=AgentMemory(max_messages=4)))
    for i in range(4):
        agent.run(f"turn {i}")
    last_prompt = model_calls[-1]
    systems = [m.content for m in last_prompt if m.role == "system"]
    assert render_summary("The user introduced themselves as Ada.") in systems


def test_aon_message_awaits_acomplete_without_holding_the_loop():
    class SlowAsyncLLM(BaseLLM):
        """Answers once another task of the loop has said go (10 s at most)."""

        def __init__(self) -> None:
            self.async_calls = 0
            self.go: asyncio.Event | None = None

        def complete(self, messages, *, tools=None):  # type: ignore[no-untyped-def]
            raise AssertionError("the sync path must not be used in aon_message")

        async def acomplete(self, messages, *, tools=None):  # type: ignore[no-untyped-def]
            self.async_calls += 1
            assert self.go is not None
            await asyncio.wait_for(self.go.wait(), 10)
            return LLMResponse(content="async summary")

    llm = SlowAsyncLLM()
    block = SummaryBlock(llm, keep_last=1, summarize_every=1)

    async def main() -> None:
        llm.go = asyncio.Event()
        asyncio.get_running_loop().call_soon(llm.go.set)  # runs only while the loop is free
        for message in conversation(2):
            await block.aon_message(message)

    asyncio.run(main())
    assert llm.async_calls == 1 and block.summary == "async summary"


def test_tracing_reports_summarized_action():
    block = SummaryBlock(CannedLLM("sum"), keep_last=1, summarize_every=1)
    memory = ComposableMemory(blocks=[block])
    with trace.capture() as spans:
        memory.add_message(UserMessage("m1 hi"))
        memory.add_message(AssistantMessage("m2 hello"))
    actions = [s.attributes.get("memory.action") for s in spans.named("memory.write.summary")]
    assert actions == ["stored", "summarized"]
    detail = spans.named("memory.write.summary")[-1].attributes["memory.detail"]
    assert json.loads(detail) == {"messages_summarized": 1}


# -- persistence, clear, copies -------------------------------------------------------


def test_save_load_round_trip(tmp_path):
    llm = summarizer()
    block = SummaryBlock(llm, keep_last=3, summarize_every=2)
    feed(block, conversation(9))
    block.save(tmp_path / "summary.json")
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]  # no temp file left

    restored = SummaryBlock(summarizer(), keep_last=3, summarize_every=2)
    restored.load(tmp_path / "summary.json")
    assert restored.summary == block.summary
    assert restored.message_count == 9
    # The restored block continues exactly where the original would.
    feed(block, conversation(12)[9:])
    feed(restored, conversation(12)[9:])
    assert restored.summary == block.summary == "m1 m2 m3 m4 m5 m6 m7 m8 m9"


def test_composable_memory_writes_blocks_summary_json(tmp_path):
    block = SummaryBlock(CannedLLM("a summary"), keep_last=1, summarize_every=1)
    memory = ComposableMemory(blocks=[block])
    memory.add_message(UserMessage("one"))
    memory.add_message(UserMessage("two"))
    memory.save(tmp_path / "state")
    assert (tmp_path / "state" / "blocks" / "summary.json").is_file()
    fresh = SummaryBlock(CannedLLM("x"), keep_last=1, summarize_every=1)
    ComposableMemory(blocks=[fresh]).load(tmp_path / "state")
    assert fresh.render("")[0].content == render_summary("a summary")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "summary.json is corrupt: Expecting property name"),
        ("[]", "summary state is corrupt: not an object"),
        ('{"summary": 3}', "summary state is corrupt: summary is not a string"),
        (
            '{"summary": "s", "message_count": -1}',
            "summary state is corrupt: message_count is not a non-negative int",
        ),
        (
            '{"summary": "s", "recent": [{"no": "role"}]}',
            "summary state is corrupt: not a message record",
        ),
    ],
)
def test_loading_a_corrupt_file_raises_and_keeps_the_state(tmp_path, content, message):
    block = SummaryBlock(CannedLLM("kept summary"), keep_last=1, summarize_every=1)
    feed(block, conversation(2))
    path = tmp_path / "summary.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=re.escape(message)):
        block.load(path)
    assert block.summary == "kept summary" and block.message_count == 2


def test_loading_a_missing_file_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"summary state file not found: .*nope\.json"):
        SummaryBlock(CannedLLM("x")).load(tmp_path / "nope.json")


def test_load_with_a_smaller_window_moves_the_overflow_to_pending(tmp_path):
    big = SummaryBlock(CannedLLM("x"), keep_last=10, summarize_every=100)
    feed(big, conversation(6))
    big.save(tmp_path / "s.json")
    small = SummaryBlock(summarizer(), keep_last=2, summarize_every=1)
    small.load(tmp_path / "s.json")
    small.on_message(UserMessage("m7 q"))
    assert small.summary == "m1 m2 m3 m4 m5"


def test_clear_forgets_everything():
    block = SummaryBlock(CannedLLM("s"), keep_last=1, summarize_every=1)
    feed(block, conversation(4))
    block.clear()
    assert block.render("") == [] and block.message_count == 0
    assert not block._pending and not block._recent


def test_isolated_copy_shares_the_llm_but_not_the_state():
    block = SummaryBlock(CannedLLM("s"), keep_last=1, summarize_every=1)
    feed(block, conversation(2))
    copy = block.isolated_copy()
    assert copy.llm is block.llm and copy.summary == "s"
    copy.clear()
    assert block.summary == "s"


def test_messages_without_text_are_not_counted():
    block = SummaryBlock(CannedLLM("s"), keep_last=1, summarize_every=1)
    block.on_message(AssistantMessage(None))
    assert block.message_count == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"keep_last": 0}, InvalidValueError, "keep_last must be >= 1, got 0"),
        ({"summarize_every": 0}, InvalidValueError, "summarize_every must be >= 1, got 0"),
        ({"max_chars": 0}, InvalidValueError, "max_chars must be >= 1, got 0"),
        ({"keep_last": True}, InvalidTypeError, "keep_last must be an int, got bool True"),
        ({"summarize_every": 1.5}, InvalidTypeError, "summarize_every must be an int, got float 1.5"),
        ({"max_chars": "800"}, InvalidTypeError, "max_chars must be an int, got str '800'"),
        ({"name": ""}, InvalidValueError, "name cannot be empty"),
        ({"name": None}, InvalidTypeError, "name must be a str, got NoneType None"),
    ],
)
def test_bad_arguments_raise_at_construction(kwargs, error, message):
    """A wrong type is a TypeError, a value out of range a ValueError, both naming the argument."""
    with pytest.raises(error, match=re.escape(message)):
        SummaryBlock(CannedLLM("x"), **kwargs)


def test_llm_is_required():
    with pytest.raises(TypeError, match="SummaryBlock needs an llm with a complete"):
        SummaryBlock(None)  # type: ignore[arg-type]


def test_slow_summary_in_the_background_does_not_hold_the_caller():
    """A hanging summary model delays nothing when the refresh runs on a BackgroundQueue."""
    import threading

    from fastaiagent.agent.memory_blocks.background import BackgroundQueue

    release = threading.Event()

    def slow(messages: list[Message]) -> str:
        release.wait(10)
        return "late summary"

    block = SummaryBlock(FunctionLLM(slow), keep_last=1, summarize_every=1)
    queue = BackgroundQueue()
    for message in conversation(2):
        queue.submit(lambda m=message: block.on_message(m))
    assert queue.flush(timeout=0.05) is False  # still summarising; the caller moved on
    assert block.render("") == []
    release.set()
    assert queue.flush(timeout=10)
    assert block.render("")[0].content == render_summary("late summary")
