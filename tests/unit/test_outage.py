"""Outages cost one wait (the shared pause of facts/outage.py) and a few log lines
(ComposableMemory's throttled "failed to render" / "failed on a message")."""

from __future__ import annotations

import logging
import threading
import uuid

import pytest

from _wait import wait_until
from fastaiagent.agent import ComposableMemory, MemoryBlock, composable
from fastaiagent.errors import StoreUnavailableError
from fastaiagent.facts import outage
from fastaiagent.llm.message import Message, UserMessage


@pytest.fixture
def server() -> outage.StoreHealth:
    """The health of a server no other test names."""
    return outage.health(outage.server_name("Test", f"test://{uuid.uuid4().hex}"))


def test_a_healthy_server_lets_every_call_through(server: outage.StoreHealth) -> None:
    for _ in range(3):
        server.check()
    server.succeeded()
    assert server.remaining() == 0.0 and server.cause == ""


def test_a_failure_pauses_the_server_for_every_caller_naming_the_cause(
    server: outage.StoreHealth,
) -> None:
    server.failed("connection refused")
    assert server.cause == "connection refused"
    assert outage.paused()[server.target] == "connection refused"
    assert 0 < server.remaining() <= outage.PAUSE_SECONDS
    # The same health object is what any other store of this server finds.
    same = outage.health(server.target)
    assert same is server
    with pytest.raises(
        StoreUnavailableError,
        match=r"paused after a failure \(connection refused\).*next attempt in \d",
    ):
        same.check("the fact store is unavailable: ")


def test_after_the_pause_one_caller_probes_and_the_others_still_wait(
    server: outage.StoreHealth, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outage, "PAUSE_SECONDS", 0.05)
    server.failed("timeout")
    wait_until(lambda: server.remaining() == 0.0, "the pause is over")
    server.check()  # the probe goes through
    server.check()  # and so does anything else its thread calls on the way
    errors: list[Exception] = []

    def other_caller() -> None:
        try:
            server.check()
        except StoreUnavailableError as exc:
            errors.append(exc)

    other = threading.Thread(target=other_caller)
    other.start()
    other.join()
    [error] = errors  # everyone else waits for the probe's verdict
    assert "timeout" in str(error)
    server.succeeded()
    server.check()
    assert server.cause == "" and outage.paused().get(server.target) is None


def test_a_failed_probe_doubles_the_pause_up_to_the_maximum(
    server: outage.StoreHealth, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outage, "PAUSE_SECONDS", 0.05)
    monkeypatch.setattr(outage, "MAX_PAUSE_SECONDS", 0.15)
    server.failed("down")
    server.failed("down")  # a call that was in flight when the pause began: no longer pause
    assert server.remaining() <= 0.05
    pauses = []
    for _ in range(3):
        wait_until(lambda: server.remaining() == 0.0, "the pause is over")
        server.check()
        server.failed("still down")
        pauses.append(server.remaining())
    assert 0.05 < pauses[0] <= 0.1 and 0.1 < pauses[1] <= 0.15 and pauses[2] <= 0.15
    assert server.cause == "still down"


def test_reset_lifts_every_pause(server: outage.StoreHealth) -> None:
    server.failed("refused")
    outage.reset()
    server.check()
    assert server.target not in outage.paused()


def test_server_names_hide_the_password() -> None:
    assert (
        outage.server_name("Postgres", "postgresql://bob:s3cret@db:5432/app")
        == "Postgres at postgresql://bob:***@db:5432/app"
    )


def test_concurrent_callers_after_the_pause_send_exactly_one_probe(
    server: outage.StoreHealth, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outage, "PAUSE_SECONDS", 0.05)
    server.failed("refused")
    wait_until(lambda: server.remaining() == 0.0, "the pause is over")
    through = []
    start = threading.Barrier(16)

    def call() -> None:
        start.wait()
        try:
            server.check()
            through.append(1)
        except StoreUnavailableError:
            pass

    threads = [threading.Thread(target=call) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(through) == 1


# -- throttled block failure logs ---------------------------------------------------


class Down(MemoryBlock):
    """A block whose store is down: every render and every message fails."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen = 0

    def render(self, query: str) -> list[Message]:
        raise StoreUnavailableError("cannot reach Postgres for the fact store: refused")

    def on_message(self, message: Message) -> None:
        self.seen += 1
        raise StoreUnavailableError("cannot reach Postgres for the fact store: refused")


def _lines(caplog: pytest.LogCaptureFixture, name: str, kind: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if f"memory block {name!r} failed {kind}" in r.getMessage()
    ]


def test_an_outage_logs_one_line_per_block_not_one_per_turn(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"facts_{uuid.uuid4().hex[:6]}"
    # Many users' memories share the throttle: block names repeat across users.
    memories = [ComposableMemory([Down(name)]) for _ in range(8)]
    with caplog.at_level(logging.WARNING, logger="fastaiagent.memory"):
        for turn in range(160):
            memory = memories[turn % len(memories)]
            context = memory.get_context("hi")
            assert all(m.role == "user" for m in context)  # the window alone: nothing injected
            memory.record([UserMessage(content=f"turn {turn}")])
    assert len(_lines(caplog, name, "to render")) == 1
    assert len(_lines(caplog, name, "on a message")) == 1
    assert sum(len(m.primary.get_messages()) for m in memories) == 160  # turns went on

    caplog.clear()
    monkeypatch.setattr(composable, "LOG_INTERVAL_SECONDS", 0.0)  # the interval has passed
    with caplog.at_level(logging.WARNING, logger="fastaiagent.memory"):
        memories[0].get_context("hi")
    [line] = _lines(caplog, name, "to render")
    assert "(159 more since the last report)" in line and "refused" in line


def test_a_new_kind_of_failure_is_logged_at_once(caplog: pytest.LogCaptureFixture) -> None:
    name = f"facts_{uuid.uuid4().hex[:6]}"

    class Broken(Down):
        def render(self, query: str) -> list[Message]:
            raise KeyError("bug")

    with caplog.at_level(logging.WARNING, logger="fastaiagent.memory"):
        ComposableMemory([Down(name)]).get_context("hi")
        ComposableMemory([Broken(name)]).get_context("hi")
    lines = _lines(caplog, name, "to render")
    assert len(lines) == 2 and "bug" in lines[1]
