"""Errors name only what the caller may see, from every door (Python, MCP, CLI, page,
plane) on every backend: alice naming a fact id of bob's gets the very words she
gets for an id nobody has, and nothing of bob (his id, subject, text or whether
the fact exists) is in them. Ids cannot be walked to list users."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from typer.testing import CliRunner

from _env import require_module
from fastaiagent import Memory
from fastaiagent.facts import Fact
from fastaiagent.facts.factory import make_fact_store

BOB = "bob@example.com"
SECRET = "is allergic to penicillin"
BACKENDS = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("redis", marks=pytest.mark.redis),
]


@dataclass
class World:
    location: str
    store: Any
    alice: int  # alice's own fact
    bob: int  # bob's fact, which alice names
    nobody: int  # an id no fact has (deleted)


@pytest.fixture(params=BACKENDS)
def world(request: pytest.FixtureRequest, own_location: Any) -> Iterator[World]:
    location = own_location(request.param)
    store = make_fact_store(location)
    bob = store.add(Fact(SECRET, scope="user", scope_id=BOB))
    alice = store.add(Fact("likes tea", scope="user", scope_id="alice"))
    nobody = store.add(Fact("gone", scope="user", scope_id="carol"))
    store.delete("user", "carol")
    yield World(location, store, alice, bob, nobody)
    store.close()


def same_words(world: World, error_for: Callable[[int], str]) -> str:
    """``error_for(id)`` for bob's id and for an id nobody has: the same text but for
    the number, and nothing of bob's in it. Returns the text for bob's id."""
    told = error_for(world.bob)
    assert re.sub(r"#\d+", "#N", told) == re.sub(r"#\d+", "#N", error_for(world.nobody))
    for secret in ("bob", "example.com", "penicillin", "carol"):
        assert secret not in told
    return told


def raised(call: Callable[[], Any]) -> str:
    """The text of the ValueError (a FastAIAgentError too: a clear refusal) ``call`` raises."""
    with pytest.raises(ValueError) as error:
        call()
    return str(error.value)


def test_python_verbs_and_stores(world: World) -> None:
    mem = Memory(world.store)
    told = same_words(world, lambda n: raised(lambda: mem.update("mine now", old=n, tier="user", id="alice")))
    assert told.startswith(f"no fact #{world.bob} in user:alice")
    same_words(world, lambda n: raised(
        lambda: world.store.update(Fact("mine now", scope="user", scope_id="alice"), n)
    ))  # fmt: skip
    same_words(world, lambda n: raised(lambda: world.store.supersede(n, world.alice)))
    for n in (world.bob, world.nobody):
        assert mem.history(n, tier="user", id="alice") == []
        assert mem.expire(n, tier="user", id="alice") is False
    assert mem.forget(tier="user", id="alice", fact=SECRET) == 0
    assert [f.fact for f in world.store.list_active("user", BOB)] == [SECRET]  # untouched
    assert [f.fact for f in world.store.list_active("user", "alice")] == ["likes tea"]


def test_the_cli(world: World) -> None:
    from fastaiagent.cli import _register, app

    _register()
    runner = CliRunner()

    def cli(*args: str) -> str:
        done = runner.invoke(app, [*args, "-l", world.location])
        assert done.exit_code == 1, done.output
        return done.stderr

    same_words(world, lambda n: cli("memory", "forget", str(n), "--subject", "user:alice"))
    same_words(world, lambda n: cli("memory", "expire", str(n), "--subject", "user:alice"))
    told = same_words(world, lambda n: cli("learn", "supersede", str(n), str(world.alice)))
    assert f"no fact #{world.bob} in user:alice" in told
    assert [f.fact for f in world.store.list_active("user", BOB)] == [SECRET]


def test_mcp_over_http(world: World) -> None:
    require_module("mcp")
    from _mcp_client import TOKEN_ALICE, call_error, http_session, serving_http

    async def update_error(url: str, fact_id: int) -> str:
        async with http_session(url, TOKEN_ALICE) as alice:
            return await call_error(alice, "update", new="mine now", old=fact_id)

    with serving_http(Memory(world.store), tokens={TOKEN_ALICE: "alice"}) as url:
        told = same_words(world, lambda n: anyio.run(update_error, url, n))
    assert f"no active user fact #{world.bob} for this connection" in told
    assert [f.fact for f in world.store.list_active("user", BOB)] == [SECRET]


def test_the_memory_page(world: World) -> None:
    """The page is the operator's view of the whole location (behind its token): a
    fact's forms act on that fact's own subject only, and an id that is gone reads
    as one that never was."""
    require_module("fastapi")
    from fastapi.testclient import TestClient

    from fastaiagent.ui import create_app

    client = TestClient(create_app(world.store), base_url="http://127.0.0.1")
    never = world.nobody + 10_000
    pages = [client.get(f"/memory/facts/{n}") for n in (world.nobody, never)]
    assert [p.status_code for p in pages] == [404, 404]
    assert re.sub(r"#\d+", "#N", pages[0].text) == re.sub(r"#\d+", "#N", pages[1].text)
    alice_only = client.get("/memory", params={"scope": "user:alice", "q": "penicillin"})
    assert alice_only.status_code == 200 and SECRET not in alice_only.text


def test_the_plane(world: World) -> None:
    """The plane serves one agent's facts and takes no fact id; what fails inside it
    answers in fixed words, whatever the failure's text held."""
    require_module("fastapi")
    from fastaiagent.plane.server import FACTS_PATH, start_plane

    world.store.add(Fact("Refunds within 30 days", scope="agent", scope_id="support"))
    world.store.add(Fact(f"{BOB} {SECRET}", scope="agent", scope_id="other"))

    def leaky_ranker(query: str, texts: Any) -> list[float]:
        raise RuntimeError(f"could not rank {texts!r} beside {BOB}")

    with start_plane(world.store, "key", ranker=leaky_ranker) as plane:
        http = httpx.Client(timeout=5, trust_env=False, headers={"Authorization": "Bearer key"})
        listed = http.get(plane.url + FACTS_PATH, params={"agent_id": "support"})
        failed = http.get(plane.url + FACTS_PATH, params={"agent_id": "support", "query": "refunds"})
    assert [f["fact"] for f in listed.json()["facts"]] == ["Refunds within 30 days"]
    assert failed.status_code == 500 and failed.json() == {"detail": "internal error (logged on the plane server)"}
