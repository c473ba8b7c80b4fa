"""An MCP tool call with an argument its tool does not take is a tool error naming it.

The SDK's argument models drop unknown keys, so ``remember(text=..., user_id="bob")``
used to store the fact for the connection's user as if ``user_id`` were honoured.
Driven in process with the SDK's in-memory client (the protocol, no subprocess).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from _env import require_module

require_module("mcp")

from mcp import Client  # noqa: E402

from fastaiagent import Memory  # noqa: E402
from fastaiagent.mcp import MemoryTools, create_server  # noqa: E402
from fastaiagent.mcp.server import unknown_arguments  # noqa: E402


@pytest.fixture
def memory(tmp_path: Path) -> Any:
    m = Memory(f"sqlite:///{tmp_path / 'facts.db'}", agent_id="support")
    yield m
    m.location.close()


def text_of(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


def calls(memory: Memory, *steps: tuple[str, dict[str, Any]]) -> list[Any]:
    """The results of calling the tools in order, as alice's connection."""
    server = create_server(MemoryTools(memory, user_id="alice", allow_global_writes=True))

    async def scenario() -> list[Any]:
        async with Client(server) as client:
            return [await client.call_tool(tool, arguments) for tool, arguments in steps]

    return anyio.run(scenario)


def test_remember_for_another_user_is_refused_and_stores_nothing(memory):
    [result] = calls(memory, ("remember", {"text": "Bob likes tea", "user_id": "bob"}))
    assert result.is_error
    said = text_of(result)
    assert "remember does not take argument user_id" in said
    assert "(it takes text, tier, confidence)" in said
    assert "nothing was done" in said and "--user" in said
    assert memory.retrieve(tier="user", id="alice") == []
    assert memory.retrieve(tier="user", id="bob") == []


def test_every_tool_names_its_unknown_arguments_and_lists_the_accepted(memory):
    results = calls(
        memory,
        ("remember", {"text": "kept", "colour": "red", "id": 3}),
        ("retrieve", {"user": "bob"}),
        ("recall", {"scope": "user"}),
        ("update", {"new": "y", "old": 1, "when": "now"}),
        ("forget", {"everything": True, "user_id": "bob"}),
    )
    said = [text_of(r) for r in results]
    assert all(r.is_error for r in results), said
    assert said[0].startswith("remember does not take arguments colour, id (it takes text, tier, confidence)")
    assert said[1].startswith("retrieve does not take argument user (it takes query, tier, limit)")
    assert said[2].startswith("recall does not take argument scope (it takes query, tier, limit)")
    assert said[3].startswith("update does not take argument when (it takes new, old, tier, confidence)")
    assert said[4].startswith("forget does not take argument user_id (it takes tier, fact, everything)")
    assert memory.retrieve(tier="user", id="alice") == []  # nothing ran


def test_known_arguments_still_work_and_the_server_keeps_answering(memory):
    results = calls(
        memory,
        ("remember", {"text": "Alice likes tea", "tier": "user", "nope": 1}),
        ("remember", {"text": "Alice likes tea", "tier": "user", "confidence": 0.9}),
        ("retrieve", {"limit": 5}),
    )
    assert [r.is_error for r in results] == [True, False, False]
    assert [f["text"] for f in results[2].structured_content["facts"]] == ["Alice likes tea"]


def test_the_input_schemas_admit_no_other_arguments(memory):
    server = create_server(MemoryTools(memory, user_id="alice"))

    async def listed() -> dict[str, Any]:
        async with Client(server) as client:
            return {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}

    schemas = anyio.run(listed)
    assert set(schemas) == {"remember", "retrieve", "update", "forget", "recall"}
    for schema in schemas.values():
        assert schema["additionalProperties"] is False


def test_unknown_arguments_message():
    assert unknown_arguments("remember", {"text": "x"}, ("text", "tier")) is None
    assert unknown_arguments("remember", None, ("text",)) is None
    assert unknown_arguments("ping", {"a": 1}, ()) == "ping does not take argument a (it takes no arguments); nothing was done"


def test_retrieve_ranks_through_the_recall_pipeline_now_and_at_first(tmp_path):
    # Two facts on one thing, equal by meaning and by keywords: the recall pipeline's
    # "now" / "originally" cue decides which comes first (the plain fusion it replaced
    # kept the index's order for both questions).
    from _vector_fakes import WordHashEmbedder

    clock = {"now": 1_700_000_000.0}
    memory = Memory(f"sqlite:///{tmp_path / 'facts.db'}", semantic="auto", embedder=WordHashEmbedder(),
                    clock=lambda: clock["now"])  # fmt: skip
    try:
        memory.persist("The team standup is in room Lyon", tier="user", id="alice")
        clock["now"] += 60 * 86400  # two months later
        memory.persist("The team standup is in room Paris", tier="user", id="alice")
        now, first = calls(
            memory,
            ("retrieve", {"query": "Which room is the team standup in now?"}),
            ("retrieve", {"query": "Which room was the team standup in originally?"}),
        )
        assert now.structured_content["facts"][0]["text"] == "The team standup is in room Paris"
        assert first.structured_content["facts"][0]["text"] == "The team standup is in room Lyon"
    finally:
        memory.location.close()
