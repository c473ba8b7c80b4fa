"""AgentMemory and ComposableMemory (acceptance 88-100, 135, 136; H17)."""

from __future__ import annotations

import json
import logging
import re

import pytest

from fastaiagent import Agent
from fastaiagent.agent import AgentMemory, ComposableMemory, MemoryBlock, StaticBlock
from fastaiagent.llm.message import AssistantMessage, Message, SystemMessage, UserMessage
from fastaiagent.testing import FunctionLLM


def transcript_llm() -> FunctionLLM:
    """Replies with every message it was sent, so tests can read the prompt back."""
    return FunctionLLM(lambda ms: " | ".join(f"{m.role}:{m.content}" for m in ms))


def name_llm() -> FunctionLLM:
    def reply(messages: list[Message]) -> str:
        said = " ".join(m.content or "" for m in messages if m.role == "user")
        if "What's my name" in (messages[-1].content or ""):
            return "Your name is Alice." if "My name is Alice" in said else "I don't know."
        return "Nice to meet you."

    return FunctionLLM(reply)


def test_agent_memory_keeps_everything_by_default():
    memory = AgentMemory()
    assert memory.max_messages is None
    for i in range(500):
        memory.add(UserMessage(f"m{i}"))
    assert len(memory) == 500


def test_window_is_prepended_and_exactly_the_turn_is_stored():
    llm = transcript_llm()
    memory = AgentMemory(max_messages=20)
    agent = Agent(name="a", llm=llm, system_prompt="Be brief.", memory=memory)
    agent.run("first")
    assert [(m.role, m.content) for m in memory.get_messages()] == [
        ("user", "first"),
        ("assistant", "system:Be brief. | user:first"),
    ]
    agent.run("second")
    sent = llm.calls[-1]
    assert [m.role for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[-1].content == "second"
    assert len(memory) == 4


def test_oldest_messages_drop_first():
    memory = AgentMemory(max_messages=3)
    for i in range(5):
        memory.add(UserMessage(str(i)))
    assert [m.content for m in memory.get_messages()] == ["2", "3", "4"]


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (0, ValueError, "max_messages must be >= 1, got 0"),
        (-1, ValueError, "max_messages must be >= 1, got -1"),
        (1.5, TypeError, "max_messages must be an int, got float 1.5"),
        ("3", TypeError, "max_messages must be an int, got str '3'"),
        (True, TypeError, "max_messages must be an int, got bool True"),
    ],
)
def test_bad_max_messages_is_refused(bad, error, message):
    with pytest.raises(error, match=re.escape(message)):
        AgentMemory(max_messages=bad)


def test_save_load_round_trip_and_agent_recalls_alice(tmp_path):
    memory = AgentMemory(max_messages=20)
    agent = Agent(name="assistant", llm=name_llm(), memory=memory)
    agent.run("My name is Alice.")
    memory.save(tmp_path / "memory.json")

    restored = AgentMemory()
    restored.load(tmp_path / "memory.json")
    assert [m.to_dict() for m in restored.get_messages()] == [m.to_dict() for m in memory.get_messages()]
    result = Agent(name="assistant", llm=name_llm(), memory=restored).run("What's my name?")
    assert result.output == "Your name is Alice."


def test_load_replaces_state_and_bad_files_change_nothing(tmp_path):
    memory = AgentMemory()
    memory.add(UserMessage("kept"))
    with pytest.raises(FileNotFoundError, match=r"memory file not found: .*missing\.json"):
        memory.load(tmp_path / "missing.json")
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text("{not json")
    with pytest.raises(ValueError, match="corrupt"):
        memory.load(corrupt)
    corrupt.write_text("[" * 100_000)  # deeper than the decoder goes
    with pytest.raises(ValueError, match="corrupt: nested too deeply"):
        memory.load(corrupt)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"messages": [{"content": "no role"}]}))
    with pytest.raises(ValueError, match="window state is corrupt: not a message record"):
        memory.load(wrong)
    assert [m.content for m in memory.get_messages()] == ["kept"]

    other = AgentMemory()
    other.add(UserMessage("replacement"))
    other.save(tmp_path / "ok.json")
    memory.load(tmp_path / "ok.json")
    assert [m.content for m in memory.get_messages()] == ["replacement"]


def test_save_is_atomic_no_temp_files_left(tmp_path):
    memory = AgentMemory()
    memory.add(UserMessage("x"))
    memory.save(tmp_path / "m.json")
    memory.save(tmp_path / "m.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


class Recorder(MemoryBlock):
    name = "recorder"

    def __init__(self, text: str = "recorded"):
        self.text = text
        self.seen: list[str] = []

    def on_message(self, message):
        self.seen.append(message.content or "")

    def render(self, query):
        return [SystemMessage(f"{self.text}:{len(self.seen)}")]


class Exploding(MemoryBlock):
    name = "exploding"

    def __init__(self):
        self.state = "kept"
        self.fail = True

    def on_message(self, message):
        if self.fail:
            raise RuntimeError("boom on message")

    def render(self, query):
        if self.fail:
            raise RuntimeError("boom on render")
        return [SystemMessage("recovered")]


def test_blocks_render_in_declaration_order_before_window():
    memory = ComposableMemory(blocks=[StaticBlock("first"), Recorder(), StaticBlock("third", name="s3")])
    memory.add_message(UserMessage("hello"))
    context = memory.get_context("q")
    assert [m.content for m in context] == ["first", "recorded:1", "third", "hello"]
    assert [m.role for m in context] == ["system", "system", "system", "user"]


def test_default_primary_is_a_20_message_window():
    memory = ComposableMemory()
    assert memory.primary.max_messages == 20


def test_failing_block_is_skipped_and_keeps_state(caplog):
    bad = Exploding()
    llm = transcript_llm()
    memory = ComposableMemory(blocks=[bad, StaticBlock("pinned")])
    agent = Agent(name="a", llm=llm, memory=memory)
    with caplog.at_level(logging.WARNING, logger="fastaiagent.memory"):
        result = agent.run("hi")
    assert "system:pinned" in result.output
    assert "boom on render" in caplog.text and "boom on message" in caplog.text
    assert bad.state == "kept"
    assert len(memory.primary) == 2
    bad.fail = False
    assert "recovered" in [m.content for m in memory.get_context("q")]


def test_save_writes_primary_and_named_block_files(tmp_path):
    class Saver(Recorder):
        name = "summary"

        def save(self, path):
            from fastaiagent._io import write_json_atomic

            write_json_atomic(path, {"seen": self.seen})

        def load(self, path):
            from fastaiagent._io import read_json

            self.seen = list(read_json(path)["seen"])

    memory = ComposableMemory(blocks=[StaticBlock("pin"), Saver()])
    memory.add_message(UserMessage("one"))
    memory.save(tmp_path / "state")
    assert (tmp_path / "state" / "primary.json").is_file()
    assert sorted(p.name for p in (tmp_path / "state" / "blocks").iterdir()) == ["summary.json"]

    (tmp_path / "state" / "blocks" / "unknown.json").write_text("{}")
    fresh_block = Saver()
    fresh = ComposableMemory(blocks=[StaticBlock("pin"), fresh_block, Recorder()])
    fresh.load(tmp_path / "state")
    assert fresh_block.seen == ["one"]
    assert [m.content for m in fresh.primary.get_messages()] == ["one"]


def test_load_of_a_corrupt_block_file_changes_nothing(tmp_path):
    memory = ComposableMemory(blocks=[Recorder()])
    memory.add_message(UserMessage("one"))
    memory.save(tmp_path / "s")
    (tmp_path / "s" / "blocks").mkdir(exist_ok=True)
    (tmp_path / "s" / "blocks" / "recorder.json").write_text("{oops")
    target = ComposableMemory(blocks=[Recorder()])
    target.add_message(UserMessage("mine"))
    with pytest.raises(ValueError, match=r"blocks/recorder\.json is corrupt"):
        target.load(tmp_path / "s")
    assert [m.content for m in target.primary.get_messages()] == ["mine"]
    with pytest.raises(FileNotFoundError, match=r"memory directory not found: .*nowhere"):
        target.load(tmp_path / "nowhere")


def test_shared_context_pipe_sees_only_upstream_blocks():
    seen: dict[str, object] = {}

    class Reader(MemoryBlock):
        name = "reader"

        def render_with_context(self, query, shared):
            seen["text"] = shared.upstream_text()
            seen["static"] = [m.content for m in shared.by_block("static")]
            seen["missing"] = shared.by_block("nope")
            seen["all"] = [m.content for m in shared.upstream_messages()]
            return [SystemMessage("reader")]

    class Later(MemoryBlock):
        name = "later"

        def render(self, query):
            return [SystemMessage("later")]

    memory = ComposableMemory(blocks=[StaticBlock("pinned fact"), Reader(), Later()])
    memory.add_message(UserMessage("window message"))
    memory.get_context("q")
    assert seen == {"text": "pinned fact", "static": ["pinned fact"], "missing": [], "all": ["pinned fact"]}


def test_custom_block_with_only_on_message_and_render_works():
    class MoodBlock(MemoryBlock):
        name = "mood"

        def __init__(self):
            self.latest_mood = ""

        def on_message(self, message: Message) -> None:
            for emoji in ("🎉", "😡"):
                if emoji in (message.content or ""):
                    self.latest_mood = emoji

        def render(self, query: str):
            return [SystemMessage(f"User's latest mood: {self.latest_mood}")] if self.latest_mood else []

    llm = transcript_llm()
    agent = Agent(name="a", llm=llm, memory=ComposableMemory(blocks=[MoodBlock()]))
    agent.run("We won 🎉")
    result = agent.run("next")
    assert "system:User's latest mood: 🎉" in result.output


def test_static_block_needs_text_and_calls_no_llm():
    with pytest.raises(ValueError, match="text cannot be empty"):
        StaticBlock("  ")
    with pytest.raises(TypeError, match="text must be a str, got NoneType"):
        StaticBlock(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name cannot be empty"):
        StaticBlock("x", name="")
    block = StaticBlock("The user's timezone is UTC+1.")
    assert [m.content for m in block.render("a")] == [m.content for m in block.render("b")]


def test_messages_round_trip_through_dicts():
    from fastaiagent.llm.message import ToolCall, ToolMessage

    originals = [
        SystemMessage("s"),
        UserMessage("u"),
        AssistantMessage("a", tool_calls=[ToolCall("1", "f", {"x": 1})]),
        ToolMessage("out", tool_call_id="1", name="f"),
    ]
    for original in originals:
        copy = Message.from_dict(original.to_dict())
        assert type(copy) is type(original) and copy == original
    with pytest.raises(ValueError, match="unknown message role 'robot'; expected one of"):
        Message("robot", "x")


def test_a_lone_surrogate_in_a_message_becomes_the_replacement_character():
    """JSON's "\\ud800" escape makes text that no UTF-8 store or API takes."""
    message = UserMessage("half \ud83d of a pair, and \udc00", name="Ana\ud800")
    assert message.content == "half \ufffd of a pair, and \ufffd"
    assert message.name == "Ana\ufffd"
    message.content.encode("utf-8")  # storable
    assert Message.from_dict({"role": "user", "content": "x\ud800"}).content == "x\ufffd"
    assert UserMessage("whole 😀 pair").content == "whole 😀 pair"
