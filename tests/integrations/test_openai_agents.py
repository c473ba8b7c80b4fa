"""FastAIAgentSession follows the Agents SDK's Session protocol on each backend,
and the SDK's own Runner (with a local model stub, no network) keeps a
conversation and the user's facts across runs and process restarts."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from _env import require_module

require_module("agents")

from agents import Agent, Runner  # noqa: E402
from agents.memory import Session, SessionSettings  # noqa: E402
from agents.tracing import set_tracing_disabled  # noqa: E402

from fastaiagent import Memory  # noqa: E402
from fastaiagent.errors import InvalidValueError  # noqa: E402
from fastaiagent.integrations.openai_agents import (  # noqa: E402
    FastAIAgentSession,
    user_facts_instructions,
    user_facts_tools,
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples/integrations/openai_agents/chat_session.py"
sys.path.insert(0, str(SCRIPT.parent))
from chat_session import LocalModel  # noqa: E402

set_tracing_disabled(True)


def msg(text: str, role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": text}


def test_session_protocol(fact_store: Any) -> None:
    session = FastAIAgentSession("s1", fact_store)
    assert isinstance(session, Session)

    async def run() -> None:
        assert await session.get_items() == [] and await session.pop_item() is None
        await session.add_items([msg("a"), msg("b", "assistant")])
        await session.add_items([msg("c")])
        assert [i["content"] for i in await session.get_items()] == ["a", "b", "c"]
        assert [i["content"] for i in await session.get_items(limit=2)] == ["b", "c"]
        assert await session.get_items(limit=0) == []
        assert await session.pop_item() == msg("c")
        assert [i["content"] for i in await session.get_items()] == ["a", "b"]
        await session.clear_session()
        assert await session.get_items() == [] and await session.pop_item() is None

    asyncio.run(run())


def test_sessions_and_projects_are_isolated(fact_store: Any) -> None:
    one = FastAIAgentSession("s", fact_store, project_id="p1")
    other_project = FastAIAgentSession("s", fact_store, project_id="p2")
    other_session = FastAIAgentSession("s2", fact_store, project_id="p1")
    same_again = FastAIAgentSession("s", fact_store, project_id="p1")

    async def run() -> None:
        await one.add_items([msg("hello")])
        assert await other_project.get_items() == []
        assert await other_session.get_items() == []
        assert await same_again.get_items() == [msg("hello")]
        await other_session.clear_session()
        assert await one.get_items() == [msg("hello")]

    asyncio.run(run())


def test_settings_limit_and_many_writers(fact_store: Any) -> None:
    session = FastAIAgentSession("s", fact_store, session_settings=SessionSettings(limit=2))
    asyncio.run(session.add_items([msg(str(i)) for i in range(5)]))
    assert [i["content"] for i in asyncio.run(session.get_items())] == ["3", "4"]
    assert len(asyncio.run(session.get_items(limit=10))) == 5
    # Two poppers never get the same item, and together they empty the session.
    popped: list[Any] = []

    def pop_all() -> None:
        while (item := asyncio.run(session.pop_item())) is not None:
            popped.append(item["content"])

    workers = [threading.Thread(target=pop_all) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(popped) == ["0", "1", "2", "3", "4"]


def test_bad_arguments_are_refused(fact_store: Any) -> None:
    with pytest.raises(InvalidValueError, match="session_id"):
        FastAIAgentSession("", fact_store)
    with pytest.raises(InvalidValueError, match="ttl_seconds"):
        FastAIAgentSession("s", fact_store, ttl_seconds=-1)


def test_runner_keeps_the_conversation_and_facts_across_runs(fact_store: Any) -> None:
    memory = Memory(location=fact_store)
    user = f"bob-{uuid.uuid4().hex[:6]}"
    agent = Agent(
        name="assistant",
        instructions=user_facts_instructions(memory, "Be brief."),
        tools=user_facts_tools(memory),
        model=LocalModel(),
    )

    async def run(session_id: str, text: str) -> str:
        session = FastAIAgentSession(session_id, fact_store)
        result = await Runner.run(agent, text, session=session, context={"user_id": user})
        return str(result.final_output)

    assert asyncio.run(run("c1", "remember I like jazz")) == "Done. Remembered: I like jazz"
    assert asyncio.run(run("c1", "any ideas?")) == "You have said 2 things to me. Facts: - I like jazz"
    assert [f.fact for f in memory.retrieve(tier="user", id=user)] == ["I like jazz"]
    items = asyncio.run(FastAIAgentSession("c1", fact_store).get_items())
    kinds = [i.get("type", i.get("role")) for i in items]
    assert kinds == ["user", "function_call", "function_call_output", "message", "user", "message"]
    # Another user sees none of bob's facts.
    other = Runner.run(agent, "hi", session=FastAIAgentSession("c9", fact_store), context={"user_id": "eve"})
    assert asyncio.run(other).final_output == "You have said 1 things to me. Facts: none"


def _turn(location: str, session_id: str, user: str, message: str, tmp_path: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), location, session_id, user, message],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tmp_path,
        env={**os.environ, "FASTAIAGENT_LOCAL_DB": str(tmp_path / "local.db")},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_runner_memory_survives_restarts(backend: str, tmp_path: Path, own_location: Any) -> None:
    location = own_location(backend)
    run = uuid.uuid4().hex[:8]
    session_id, user = f"chat-{run}", f"bob-{run}"
    try:
        first = _turn(location, session_id, user, "remember I am allergic to peanuts", tmp_path)
        assert first == "Done. Remembered: I am allergic to peanuts"
        second = _turn(location, session_id, user, "what should I eat?", tmp_path)
        assert second == "You have said 2 things to me. Facts: - I am allergic to peanuts"
        assert len(asyncio.run(FastAIAgentSession(session_id, location).get_items())) == 6
    finally:
        asyncio.run(FastAIAgentSession(session_id, location).clear_session())
        Memory(location=location).forget(tier="user", id=user)
