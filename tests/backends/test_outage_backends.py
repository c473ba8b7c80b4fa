"""A store outage costs one wait, not one per turn (issue 15, item 10).

Servers that never answer, refuse, reject the user, or go away mid-life and
come back: 100 turns (shared windows and learn= included) cost one connection
timeout in all, every reply comes back, direct verbs fail at once naming the
cause, and memory returns after the pause.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from _wait import wait_until
from fastaiagent import Agent, Memory, RunContext
from fastaiagent.errors import StoreConfigError, StoreUnavailableError
from fastaiagent.facts import outage
from fastaiagent.llm.message import Message
from fastaiagent.testing import FunctionLLM, echo_llm

TIMEOUT = 2  # seconds: the connect timeout each test sets (libpq's minimum)


class Relay:
    """A TCP endpoint on 127.0.0.1 the test controls: it forwards to ``target``
    (or, with no target, accepts and never answers); ``cut()`` refuses new
    connections and drops the open ones; ``restore()`` listens again."""

    def __init__(self, target: int | None = None) -> None:
        self.target = target
        self.sockets: list[socket.socket] = []
        self.accepted = 0  # connections accepted: each a client's attempt to connect
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # the listener was closed: stop
                return
            with self.lock:
                self.accepted += 1
                self.sockets.append(client)
            if self.target is None:
                continue  # silent: hold the connection, never answer
            upstream = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.sockets.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for each in (source, sink):
            with contextlib.suppress(OSError):
                each.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes accept(); close alone would not
        self.listener.close()
        with self.lock:
            for each in self.sockets:
                with contextlib.suppress(OSError):
                    each.shutdown(socket.SHUT_RDWR)
                each.close()
            self.sockets.clear()

    def restore(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()


@pytest.fixture
def silent() -> Iterator[Relay]:
    relay = Relay()
    yield relay
    relay.cut()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def extractor() -> FunctionLLM:
    """learn=: states every user message as a fact."""

    def reply(messages: list[Message]) -> str:
        said = (messages[-1].content or "").split("<<<\n", 1)[-1].rsplit("\n>>>", 1)[0]
        return json.dumps({"facts": [{"fact": said.strip()[:80]}]})

    return FunctionLLM(reply)


def hundred_turns(location: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], Memory]:
    """100 turns of two users with shared windows and learn=; the replies. The
    pause outlasts the turns however slow the machine, so a second attempt to
    connect could only come from a call that ignored it."""
    monkeypatch.setattr(outage, "PAUSE_SECONDS", 600.0)
    memory = Memory(
        location=location,
        user_id=lambda ctx: ctx.state,
        agent_id="outage",
        window_store="shared",
        learn=extractor(),
    )
    agent = Agent(name="outage", llm=echo_llm(), memory=memory)
    replies = [
        agent.run(f"I like tea number {i}", context=RunContext(state=f"user{i % 2}")).output
        for i in range(100)
    ]
    return replies, memory


def assert_one_timeout(relay: Relay, replies: list[str]) -> None:
    assert replies == [f"You said: I like tea number {i}" for i in range(100)]
    # The server was tried once (that attempt waited out the connect timeout), and
    # only once: every other call of the 100 turns failed at once.
    assert relay.accepted == 1


@pytest.mark.postgres
def test_postgres_that_never_answers_costs_one_timeout_for_100_turns(
    silent: Relay, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"postgresql://postgres@127.0.0.1:{silent.port}/test?connect_timeout={TIMEOUT}"
    with caplog.at_level(logging.WARNING, logger="fastaiagent"):
        replies, memory = hundred_turns(url, monkeypatch)
    assert_one_timeout(silent, replies)
    renders = [r for r in caplog.records if "failed to render" in r.getMessage()]
    assert len(renders) <= 3  # one line per block at most, not one per turn
    with pytest.raises(StoreUnavailableError, match=r"timeout expired.*next attempt in"):
        memory.retrieve(tier="user", id="user0")
    memory.flush(timeout=10)


@pytest.mark.redis
def test_redis_that_never_answers_costs_one_timeout_for_100_turns(
    silent: Relay, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"redis://127.0.0.1:{silent.port}/0?socket_timeout={TIMEOUT}&socket_connect_timeout={TIMEOUT}"
    replies, memory = hundred_turns(url, monkeypatch)
    assert_one_timeout(silent, replies)
    with pytest.raises(StoreUnavailableError, match=r"Timeout.*next attempt in"):
        memory.persist("x", tier="user", id="user0")
    memory.flush(timeout=10)


def count_connects(scheme: str, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``[n]``: how many times the driver has been asked to connect (psycopg's
    connect, redis-py's connection setup), counted as it goes."""
    calls = [0]

    def counted(real: Any) -> Any:
        def connect(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            return real(*args, **kwargs)

        return connect

    if scheme.startswith("postgres"):
        import psycopg

        monkeypatch.setattr(psycopg, "connect", counted(psycopg.connect))
    else:
        from redis.connection import Connection

        monkeypatch.setattr(Connection, "connect_check_health", counted(Connection.connect_check_health))
    return calls


@pytest.mark.parametrize("scheme", ["postgresql://postgres@", "redis://"])
def test_a_refused_server_fails_verbs_at_once_naming_the_cause(
    scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = closed_port()
    url = f"{scheme}127.0.0.1:{port}/{'test' if 'postgres' in scheme else '0'}"
    connects = count_connects(scheme, monkeypatch)
    memory = Memory(location=url)
    with pytest.raises(StoreUnavailableError, match=r"(?i)connection refused"):
        memory.persist("likes tea", tier="user", id="alice")
    assert connects[0] >= 1  # the server was tried
    tried = connects[0]
    for verb in (
        lambda: memory.retrieve(tier="user", id="alice"),
        lambda: memory.persist("likes tea", tier="user", id="alice"),
        lambda: memory.forget(tier="user", id="alice"),
    ):
        with pytest.raises(
            StoreUnavailableError, match=r"(?i)paused after a failure \(.*refused.*next attempt in"
        ):
            verb()
    # Another Memory on the same server shares the pause: no second wait.
    other = Memory(location=url)
    with pytest.raises(StoreUnavailableError, match="paused after a failure"):
        other.retrieve(tier="user", id="bob")
    assert connects[0] == tried  # at once: none of them tried to connect again


@pytest.mark.postgres
def test_a_rejected_role_is_named_in_the_error(postgres_url: str) -> None:
    url = re.sub(r"://[^@/]*@", "://no_such_role_fa15@", postgres_url, count=1)
    with pytest.raises(StoreConfigError, match='role "no_such_role_fa15" does not exist'):
        Memory(location=url).persist("x", tier="user", id="alice")


def _back(memory: Memory, user: str) -> list[str] | None:
    try:
        return [f.fact for f in memory.retrieve(tier="user", id=user)]
    except StoreUnavailableError:
        return None


def _cut_and_restore(relay: Relay, location: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outage, "PAUSE_SECONDS", 0.3)
    memory = Memory(location=location, user_id="alice", agent_id="outage")
    agent = Agent(name="outage", llm=echo_llm(), memory=memory)
    memory.persist("likes green tea", tier="user", id="alice")
    relay.cut()
    assert agent.run("hello").output == "You said: hello"  # the run goes on without memory
    with pytest.raises(StoreUnavailableError, match="next attempt in"):
        memory.retrieve(tier="user", id="alice")
    relay.restore()
    assert wait_until(lambda: _back(memory, "alice"), "memory is back") == ["likes green tea"]
    assert agent.run("again").output == "You said: again"


@pytest.mark.postgres
def test_postgres_going_away_and_coming_back(
    postgres_url: str, pg_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastaiagent.facts.postgres.store import PostgresFactStore

    port = int(re.search(r":(\d+)/", postgres_url).group(1))  # type: ignore[union-attr]
    relay = Relay(port)
    url = postgres_url.replace(f":{port}/", f":{relay.port}/")
    store = PostgresFactStore(url, table=pg_table, connect_timeout=TIMEOUT)
    try:
        _cut_and_restore(relay, store, monkeypatch)
    finally:
        store.close()
        relay.cut()


@pytest.mark.redis
def test_redis_going_away_and_coming_back(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastaiagent.facts.redis.store import RedisFactStore

    port = int(re.search(r":(\d+)/", redis_url).group(1))  # type: ignore[union-attr]
    relay = Relay(port)
    url = redis_url.replace(f":{port}/", f":{relay.port}/")
    store = RedisFactStore(url, prefix=redis_prefix, socket_timeout=TIMEOUT)
    try:
        _cut_and_restore(relay, store, monkeypatch)
    finally:
        store.close()
        relay.cut()
