"""FactExtractionBlock(persist=True) on the real Postgres and Redis stores.

Contradictions supersede with history, the learned-fact cap spares direct
writes, and other subjects are untouched, on every backend alike.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from fastaiagent.agent.memory_blocks.facts import FactExtractionBlock
from fastaiagent.learn import Fact, FactStore
from fastaiagent.llm.message import Message, UserMessage
from fastaiagent.testing import FunctionLLM

_KNOWN = re.compile(r"^(F\d+): (.*)$", re.MULTILINE)


def extractor() -> FunctionLLM:
    def reply(messages: list[Message]) -> str:
        body = messages[-1].content or ""
        ids = {text.casefold(): fid for fid, text in _KNOWN.findall(body)}
        said = body.split("<<<\n", 1)[1].rsplit("\n>>>", 1)[0]
        match = re.match(r"FACT: (.*?)(?: \| REPLACES: (.*))?$", said.strip())
        if not match:
            return '{"facts": []}'
        replaces = ids.get((match.group(2) or "").casefold())
        return json.dumps({"facts": [{"fact": match.group(1), "replaces": replaces}]})

    return FunctionLLM(reply)


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def store(request: pytest.FixtureRequest) -> Iterator[FactStore]:
    if request.param == "postgres":
        from fastaiagent.facts.postgres.store import PostgresFactStore

        pg = PostgresFactStore(
            request.getfixturevalue("postgres_url"), table=request.getfixturevalue("pg_table")
        )
        yield pg
        pg.close()
    else:
        from fastaiagent.facts.redis.store import RedisFactStore

        rd = RedisFactStore(
            request.getfixturevalue("redis_url"), prefix=request.getfixturevalue("redis_prefix")
        )
        yield rd
        rd.close()


def feed(block: FactExtractionBlock, *texts: str) -> None:
    for text in texts:
        block.on_message(UserMessage(text))


def test_changed_preference_supersedes_with_history(store: FactStore) -> None:
    store.add(Fact("Bob prefers phone", scope="user", scope_id="bob"))
    block = FactExtractionBlock(extractor(), persist=True, scope_id="alice", store=store)
    feed(block, "FACT: Prefers email", "FACT: Prefers Slack | REPLACES: Prefers email")
    assert [f.fact for f in store.list_active("user", "alice")] == ["Prefers Slack"]
    history = store.browse(scope="user", scope_id="alice", include_superseded=True)
    by_text = {f.fact: f for f in history}
    assert by_text["Prefers email"].superseded_by == by_text["Prefers Slack"].id
    assert [f.fact for f in store.list_active("user", "bob")] == ["Bob prefers phone"]


def test_cap_prunes_learned_facts_only_and_writes_are_idempotent(store: FactStore) -> None:
    store.add(Fact("Written directly", scope="user", scope_id="alice"))
    block = FactExtractionBlock(extractor(), persist=True, scope_id="alice", store=store,
                                max_persisted=2)
    feed(block, "FACT: one", "FACT: two", "FACT: three", "FACT: three")
    facts = [f.fact for f in store.list_active("user", "alice", limit=None)]
    assert sorted(facts) == ["Written directly", "three", "two"]
    assert all(f.source == "learned" and f.confidence == 0.6
               for f in store.list_active("user", "alice") if f.fact != "Written directly")
