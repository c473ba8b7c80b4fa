"""``fastaiagent mcp`` on Postgres and Redis, driven by the official ``mcp`` client.

Over HTTP (in a thread, on a fresh table / key prefix): the round trip, and a
second token's user sees nothing of the first. Over stdio, the command with a
``--location`` URL, as a host would spawn it (naming a table / key prefix of
the test's own with the URL's ``table=`` / ``prefix=`` option).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import anyio
import pytest

from _env import require_module

require_module("mcp")

from _mcp_client import (  # noqa: E402
    TOKEN_ALICE,
    TOKEN_BOB,
    call,
    call_error,
    cli_args,
    http_session,
    recalled,
    round_trip,
    serving_http,
    stdio_session,
)
from fastaiagent import Memory  # noqa: E402

TOKENS = {TOKEN_ALICE: "alice", TOKEN_BOB: "bob"}


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def memory(request: pytest.FixtureRequest) -> Iterator[Memory]:
    if request.param == "postgres":
        from fastaiagent.facts.postgres.store import PostgresFactStore

        url, table = request.getfixturevalue("postgres_url"), request.getfixturevalue("pg_table")
        store = PostgresFactStore(url, max_pool_size=4, table=table)
    else:
        from fastaiagent.facts.redis.store import RedisFactStore

        url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
        store = RedisFactStore(url, prefix=prefix)
    m = Memory(store, agent_id="support")
    yield m
    store.close()


def test_http_round_trip_and_isolation(memory):
    async def scenario(url: str) -> None:
        async with http_session(url, TOKEN_ALICE) as alice:
            await round_trip(alice)
            fact_id = (await call(alice, "remember", text="Alice's locker is 42"))["id"]
        async with http_session(url, TOKEN_BOB) as bob:
            assert await recalled(bob) == []
            assert "no active user fact" in await call_error(bob, "update", new="mine", old=fact_id)
            assert (await call(bob, "forget", everything=True))["deleted"] == 0
        async with http_session(url, TOKEN_ALICE) as alice:
            assert await recalled(alice) == ["Alice's locker is 42"]

    with serving_http(memory, tokens=TOKENS) as url:
        anyio.run(scenario, url)
    assert [f.fact for f in memory.retrieve(tier="user", id="alice")] == ["Alice's locker is 42"]


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ],
)
def test_stdio_command_on_a_location_url(backend, own_location, tmp_path):
    location = own_location(backend)
    user = f"mcp-{uuid.uuid4().hex[:12]}"

    async def scenario() -> None:
        args = cli_args("--location", location, "--user", user)
        async with stdio_session(args, str(tmp_path)) as session:
            await round_trip(session)
            await call(session, "remember", text="durable across processes")

    anyio.run(scenario)
    memory = Memory(location)  # another process's view: the library's own Memory
    try:
        assert [f.fact for f in memory.retrieve(tier="user", id=user)] == [
            "durable across processes"
        ]
    finally:
        memory.forget(tier="user", id=user)
        memory.location.close()
