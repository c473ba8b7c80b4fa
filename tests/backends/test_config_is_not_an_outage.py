"""A configuration error is not an outage (issue #46), on SQLite, Postgres and Redis.

A store configured wrong (a missing database or role, a value libpq refuses, a
Redis DB index the server lacks, something other than Redis at the address, a
SQLite path that is a folder) raises StoreConfigError naming the fix from every
door: ``warm()``, the verbs, and the first ``agent.run`` / ``arun``, which do not
answer without memory. It is never paused and retried in the background. Only a
store that is down degrades a run to answering without memory.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from _env import free_port, postgres_location, redis_location, unique_name
from fastaiagent import Agent, Memory, RunContext
from fastaiagent.errors import StoreConfigError, StoreUnavailableError
from fastaiagent.facts import outage
from fastaiagent.testing import echo_llm


@dataclass
class Session:
    user_id: str


@pytest.fixture
def not_redis() -> Iterator[int]:
    """A TCP server on a free port that answers every connection with HTTP text."""
    listener = socket.create_server(("127.0.0.1", free_port()))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    listener.close()


def _misconfigured(kind: str, tmp_path: Path, postgres_url: Callable[[], str], redis_url: Callable[[], str], not_redis: Callable[[], int]) -> tuple[str, str]:  # fmt: skip
    """(a location configured wrong, words of the fix its error names)."""
    table, prefix = unique_name("cfg"), unique_name("cfg")
    if kind == "sqlite-folder":
        return f"sqlite:///{tmp_path}", "writable by this user"
    if kind == "postgres-missing-database":
        url = postgres_url().rsplit("/", 1)[0] + "/fa_no_such_database_46"
        return postgres_location(url, table), "check the URL's user, password and database"
    if kind == "postgres-missing-role":
        url = postgres_url().replace("://postgres@", "://fa_no_such_role_46@", 1)
        return postgres_location(url, table), "check the URL's user, password and database"
    if kind == "postgres-bad-value":
        return postgres_location(postgres_url() + "?sslmode=bogus", table), "correct that value in the URL"
    if kind == "redis-db-index":
        url = redis_url().rsplit("/", 1)[0] + "/99"
        return redis_location(url, prefix), "must be a DB index the server has"
    return redis_location(f"redis://127.0.0.1:{not_redis()}/0", prefix), "a Redis server's"


CASES = [
    "sqlite-folder",
    pytest.param("postgres-missing-database", marks=pytest.mark.postgres),
    pytest.param("postgres-missing-role", marks=pytest.mark.postgres),
    pytest.param("postgres-bad-value", marks=pytest.mark.postgres),
    pytest.param("redis-db-index", marks=pytest.mark.redis),
    pytest.param("redis-not-redis", marks=pytest.mark.redis),
]


@pytest.fixture
def misconfigured(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    kind = request.param
    return _misconfigured(
        kind, tmp_path,
        lambda: request.getfixturevalue("postgres_url"),
        lambda: request.getfixturevalue("redis_url"),
        lambda: request.getfixturevalue("not_redis"),
    )  # fmt: skip


@pytest.mark.parametrize("misconfigured", CASES, indirect=True)
def test_a_configuration_error_raises_from_every_door_and_is_never_retried(misconfigured, caplog):
    outage.reset()
    location, fix = misconfigured
    memory = Memory(location, user_id=lambda ctx: ctx.state.user_id)  # builds: nothing is read yet
    agent = Agent(name="support", llm=echo_llm(), memory=memory)
    context = RunContext(state=Session("alice"))
    doors: dict[str, Callable[[], object]] = {
        "warm": memory.warm,
        "first run": lambda: agent.run("hello", context=context),
        "second run": lambda: agent.run("hello again", context=context),
        "arun": lambda: asyncio.run(agent.arun("hello", context=context)),
        "persist": lambda: memory.persist("Likes tea", id="alice"),
        "retrieve": lambda: memory.retrieve(id="alice"),
    }
    with caplog.at_level(logging.INFO, logger="fastaiagent"):
        for door, call in doors.items():
            with pytest.raises(StoreConfigError) as info:
                call()
            assert not isinstance(info.value, StoreUnavailableError), door
            assert fix in str(info.value), (door, str(info.value))
    assert outage.paused() == {}  # nothing paused: waiting would not fix it
    assert "retrying" not in caplog.text and "runs without it" not in caplog.text


@pytest.mark.postgres
def test_a_store_that_is_down_still_degrades_the_run(postgres_url, monkeypatch):
    outage.reset()
    monkeypatch.setattr(outage, "PAUSE_SECONDS", 0.2)
    down = f"postgresql://postgres@127.0.0.1:{free_port()}/test?connect_timeout=2"
    memory = Memory(down, user_id=lambda ctx: ctx.state.user_id)
    agent = Agent(name="support", llm=echo_llm(), memory=memory)
    assert agent.run("hello", context=RunContext(state=Session("alice"))).output == "You said: hello"
    with pytest.raises(StoreUnavailableError):
        memory.warm()
    assert outage.paused()
    outage.reset()
