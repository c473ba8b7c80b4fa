"""forget reaches every agent of a location; "*" of one agent stays in its lane;
a resolver's "*" is never a user. On the real SQLite file, Postgres and Redis."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from fastaiagent import Agent, Memory, RunContext
from fastaiagent.agent.windows import WindowKey, window_store_for
from fastaiagent.llm.message import Message
from fastaiagent.testing import FunctionLLM

CARD = "my card number is 4111 1111 1111 1111"


@dataclass
class Session:
    user_id: str


def ctx(user: str) -> RunContext:
    return RunContext(state=Session(user))


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def store(request: pytest.FixtureRequest, tmp_path) -> Iterator[Any]:
    """One fact store object that every agent of a test shares (one location)."""
    if request.param == "sqlite":
        from fastaiagent.facts.sqlite.store import SQLiteFactStore

        yield SQLiteFactStore(tmp_path / "facts.db")
    elif request.param == "postgres":
        from fastaiagent.facts.postgres.store import PostgresFactStore

        url, table = request.getfixturevalue("postgres_url"), request.getfixturevalue("pg_table")
        pg = PostgresFactStore(url, table=table, max_pool_size=4)
        yield pg
        pg.close()  # pg_table destroys the store
    else:
        from fastaiagent.facts.redis.store import RedisFactStore

        rd = RedisFactStore(request.getfixturevalue("redis_url"), prefix=request.getfixturevalue("redis_prefix"))
        yield rd
        rd.close()


class Recorder:
    """An LLM that answers "ok" and keeps every prompt it was sent."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.llm = FunctionLLM(self._reply)

    def _reply(self, messages: list[Message]) -> str:
        self.prompts.append("\n".join(f"{m.role}: {m.content}" for m in messages))
        return "ok"


def agent_on(store: Any, agent_id: str | None, recorder: Recorder, **kwargs: Any) -> tuple[Agent, Memory]:
    memory = Memory(store, agent_id=agent_id, user_id=lambda c: c.state.user_id, **kwargs)
    return Agent(name=agent_id or "anon", llm=recorder.llm, memory=memory), memory


def test_forget_removes_the_user_from_every_agents_shared_window(store) -> None:
    seen = Recorder()
    a, mem_a = agent_on(store, "support", seen, window_store="shared")
    b, _ = agent_on(store, "billing", seen, window_store="shared")
    a.run(CARD, context=ctx("alice"))
    b.run(CARD, context=ctx("alice"))
    b.run("bob's own words", context=ctx("bob"))
    windows = window_store_for(store)
    assert windows.load(WindowKey("billing", "", "alice")) is not None

    mem_a.forget(tier="user", id="alice")

    assert windows.load(WindowKey("billing", "", "alice")) is None
    assert windows.load(WindowKey("support", "", "alice")) is None
    assert windows.load(WindowKey("billing", "", "bob")) is not None
    b.run("what is my card?", context=ctx("alice"))
    assert "4111" not in seen.prompts[-1]
    b.run("and mine?", context=ctx("bob"))
    assert "bob's own words" in seen.prompts[-1]


def test_forget_reaches_in_process_windows_of_other_agents(store) -> None:
    seen = Recorder()
    _, mem_a = agent_on(store, "support", seen)
    b, mem_b = agent_on(store, "billing", seen)
    b.run(CARD, context=ctx("alice"))
    b.run("bob's own words", context=ctx("bob"))
    assert "alice" in mem_b.cached_users

    mem_a.forget(tier="user", id="alice")

    assert mem_b.cached_users == ["bob"]
    b.run("what is my card?", context=ctx("alice"))
    assert "4111" not in seen.prompts[-1]


def test_forget_star_of_one_agent_leaves_other_agents_facts_and_windows(store) -> None:
    seen = Recorder()
    a, mem_a = agent_on(store, "support", seen, window_store="shared")
    b, mem_b = agent_on(store, "billing", seen, window_store="shared")
    for user in ("alice", "bob"):
        mem_a.persist(f"{user} told support a secret", tier="user", id=user)
        mem_b.persist(f"{user} pays by card", tier="user", id=user)
        a.run(f"{user} talks to support", context=ctx(user))
        b.run(f"{user} talks to billing", context=ctx(user))
    # User facts are shared by the agents; each records the agent that wrote it.
    written = {f.fact: f.metadata for f in mem_b.retrieve(tier="user", id="alice")}
    assert written == {
        "alice pays by card": {"agent_id": "billing"},
        "alice told support a secret": {"agent_id": "support"},
    }

    assert mem_a.forget(tier="user", id="*") == 2

    for user in ("alice", "bob"):
        assert [f.fact for f in mem_b.retrieve(tier="user", id=user)] == [f"{user} pays by card"]
        windows = window_store_for(store)
        assert windows.load(WindowKey("billing", "", user)) is not None
        assert windows.load(WindowKey("support", "", user)) is None
    b.run("what did I say?", context=ctx("alice"))
    assert "alice talks to billing" in seen.prompts[-1]
    a.run("what did I say?", context=ctx("alice"))
    assert "alice talks to support" not in seen.prompts[-1]
    assert "told support a secret" not in seen.prompts[-1]


def test_forget_star_without_an_agent_id_deletes_every_user_fact(store) -> None:
    seen = Recorder()
    _, mem_b = agent_on(store, "billing", seen)
    _, anon = agent_on(store, None, seen)
    mem_b.persist("alice pays by card", tier="user", id="alice")
    anon.persist("bob likes tea", tier="user", id="bob")
    assert anon.forget(tier="user", id="*") == 2
    assert mem_b.retrieve(tier="user", id="alice") == []


def test_agent_only_forget_is_scoped_to_this_agent_on_purpose(store) -> None:
    seen = Recorder()
    a, mem_a = agent_on(store, "support", seen, window_store="shared")
    b, mem_b = agent_on(store, "billing", seen, window_store="shared")
    mem_a.persist("alice told support a secret", tier="user", id="alice")
    mem_b.persist("alice pays by card", tier="user", id="alice")
    a.run("alice talks to support", context=ctx("alice"))
    b.run("alice talks to billing", context=ctx("alice"))

    assert mem_a.forget(tier="user", id="alice", agent_only=True) == 1

    assert [f.fact for f in mem_b.retrieve(tier="user", id="alice")] == ["alice pays by card"]
    windows = window_store_for(store)
    assert windows.load(WindowKey("support", "", "alice")) is None
    assert windows.load(WindowKey("billing", "", "alice")) is not None


def test_a_resolver_returning_star_injects_no_users_facts(store) -> None:
    seen = Recorder()
    memory = Memory(store, agent_id="support", user_id=lambda c: "*")
    memory.persist("Bob's address is 1 Main St", tier="user", id="bob")
    memory.persist("Alice's card ends 4242", tier="user", id="alice")
    memory.persist("The shop opens at 9", tier="global")
    agent = Agent(name="support", llm=seen.llm, memory=memory)
    agent.run("who am I?", context=ctx("anyone"))

    async def async_run() -> None:
        await agent.arun("who am I, async?", context=ctx("anyone"))

    import asyncio

    asyncio.run(async_run())
    assert len(seen.prompts) == 2
    for prompt in seen.prompts:
        assert "Main St" not in prompt and "4242" not in prompt
        assert "The shop opens at 9" in prompt  # an unresolved caller still gets global facts
    assert memory.cached_users == []
