"""Memory that knows time, on SQLite, the real Postgres and the real Redis, with an
injected clock: ``ttl=`` facts stop being injected and returned when they expire,
``as_of`` reads the old and the new version around an ``update``, ``history``
lists a fact's chain, and a learned "until Friday" fact expires on Saturday.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from fastaiagent import Agent, Memory
from fastaiagent.facts.store import FactStore
from fastaiagent.llm.message import Message
from fastaiagent.testing import CannedLLM, FunctionLLM

TUESDAY = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)  # a Tuesday


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FactStore]:
    made: Any
    if request.param == "sqlite":
        from fastaiagent.facts.sqlite.store import SQLiteFactStore

        made = SQLiteFactStore(tmp_path / "facts.db")
    elif request.param == "postgres":
        from fastaiagent.facts.postgres.store import PostgresFactStore

        made = PostgresFactStore(
            request.getfixturevalue("postgres_url"), table=request.getfixturevalue("pg_table")
        )
    else:
        from fastaiagent.facts.redis.store import RedisFactStore

        made = RedisFactStore(
            request.getfixturevalue("redis_url"), prefix=request.getfixturevalue("redis_prefix")
        )
    yield made
    made.close()


@pytest.fixture
def clock() -> Clock:
    return Clock(TUESDAY)


def _prompt(llm: CannedLLM | FunctionLLM) -> str:
    """Everything the model was shown on its last call."""
    return "\n".join(m.content or "" for m in llm.calls[-1] if isinstance(m.content, str))


def _texts(facts: list[Any]) -> list[str]:
    return [f.fact for f in facts]


def test_a_ttl_fact_stops_being_injected_and_returned_when_it_expires(
    store: FactStore, clock: Clock
) -> None:
    mem = Memory(location=store, user_id="alice", clock=clock)
    mem.persist("Promo code SAVE20 is live", ttl=timedelta(hours=1))
    mem.persist("Prefers email")
    llm = CannedLLM("ok")
    agent = Agent(name="shop", llm=llm, memory=mem)
    agent.run("hi")
    assert "SAVE20" in _prompt(llm) and "Prefers email" in _prompt(llm)
    clock.advance(minutes=59)
    assert _texts(mem.retrieve()) == ["Prefers email", "Promo code SAVE20 is live"]
    clock.advance(minutes=1)
    agent.run("hi again")
    assert "SAVE20" not in _prompt(llm) and "Prefers email" in _prompt(llm)
    assert _texts(mem.retrieve()) == ["Prefers email"]
    assert _texts(mem.retrieve(include_expired=True)) == ["Prefers email", "Promo code SAVE20 is live"]
    other = Memory(location=store, user_id="bob", clock=clock)  # other users are untouched
    other.persist("Bob's own fact", ttl=60)
    assert _texts(other.retrieve()) == ["Bob's own fact"]


def test_as_of_before_and_after_an_update(store: FactStore, clock: Clock) -> None:
    mem = Memory(location=store, user_id="alice", clock=clock)
    mem.persist("Plan: free")
    before = clock.now
    clock.advance(days=1)
    mem.update("Plan: pro", old="Plan: free")
    clock.advance(days=1)
    assert _texts(mem.retrieve(as_of=before + timedelta(hours=1))) == ["Plan: free"]
    assert _texts(mem.retrieve(as_of=clock.now)) == ["Plan: pro"]
    assert _texts(mem.retrieve(as_of=(before - timedelta(seconds=1)).timestamp())) == []
    assert _texts(mem.retrieve()) == ["Plan: pro"]


def test_history_lists_the_chain_newest_first(store: FactStore, clock: Clock) -> None:
    mem = Memory(location=store, user_id="alice", clock=clock)
    first = mem.persist("Lives in Paris", confidence=0.8)
    clock.advance(days=30)
    mem.update("Lives in Berlin", old=first)
    clock.advance(days=30)
    newest = mem.update("Lives in Lisbon", old="Lives in Berlin", valid_from=datetime(2027, 1, 1))
    chain = mem.history("Lives in Lisbon")
    assert _texts(chain) == ["Lives in Lisbon", "Lives in Berlin", "Lives in Paris"]
    assert chain[0].id == newest and chain[0].superseded_at is None
    assert chain[0].valid_from == datetime(2027, 1, 1, tzinfo=timezone.utc).timestamp()
    assert chain[1].superseded_at == chain[0].created_at
    assert chain[2].superseded_at == chain[1].created_at
    assert (chain[2].confidence, chain[2].source) == (0.8, "manual")
    assert [f.id for f in mem.history(first)] == [f.id for f in chain]  # from any version
    bob = Memory(location=store, user_id="bob", clock=clock)
    assert bob.history(first, id="bob") == []  # another user's chain is not shown


def test_expire_ends_a_fact_for_this_user_only(store: FactStore, clock: Clock) -> None:
    alice = Memory(location=store, user_id="alice", clock=clock)
    bob = Memory(location=store, user_id="bob", clock=clock)
    mine = alice.persist("Allergic to peanuts")
    bob.persist("Allergic to peanuts")
    assert bob.expire(mine) is False  # alice's id, asked for bob: nothing happens
    clock.advance(hours=1)
    assert alice.expire("Allergic to peanuts") is True
    assert alice.retrieve() == [] and _texts(bob.retrieve()) == ["Allergic to peanuts"]
    assert _texts(alice.retrieve(as_of=clock.now - timedelta(seconds=1))) == ["Allergic to peanuts"]


def _learner(fact: str) -> FunctionLLM:
    def reply(messages: list[Message]) -> str:
        said = messages[-1].content or ""
        return json.dumps({"facts": [{"fact": fact, "replaces": None}] if "discount" in said else []})

    return FunctionLLM(reply)


def test_a_learned_until_friday_fact_expires_on_saturday(store: FactStore, clock: Clock) -> None:
    llm = CannedLLM("noted")
    mem = Memory(
        location=store,
        user_id="alice",
        learn=_learner("Has a 20% discount until Friday"),
        learn_in_background=False,
        clock=clock,
        fact_ttl=timedelta(days=90),  # a stated end wins over the default
    )
    agent = Agent(name="shop", llm=llm, memory=mem)
    agent.run("I got a discount that lasts until Friday")
    (learned,) = mem.retrieve()
    saturday = datetime(2026, 12, 5, tzinfo=timezone.utc).timestamp()
    assert (learned.source, learned.valid_to) == ("learned", saturday)
    clock.now = datetime(2026, 12, 4, 23, 59, tzinfo=timezone.utc)  # Friday night
    agent.run("hello")
    assert "20% discount" in _prompt(llm)
    clock.now = datetime(2026, 12, 5, tzinfo=timezone.utc)  # Saturday
    agent.run("hello")
    assert "20% discount" not in _prompt(llm)
    assert mem.retrieve() == []


def test_fact_ttl_ends_learned_facts_not_written_ones(store: FactStore, clock: Clock) -> None:
    mem = Memory(
        location=store,
        user_id="alice",
        learn=_learner("Wants the discount newsletter"),
        learn_in_background=False,
        clock=clock,
        fact_ttl=timedelta(days=30),
    )
    mem.persist("Written by hand")
    Agent(name="shop", llm=CannedLLM("ok"), memory=mem).run("discount news please")
    learned = {f.fact: f for f in mem.retrieve()}
    assert learned["Wants the discount newsletter"].valid_to == (clock.now + timedelta(days=30)).timestamp()
    assert learned["Written by hand"].valid_to is None
    clock.advance(days=30)
    assert _texts(mem.retrieve()) == ["Written by hand"]
