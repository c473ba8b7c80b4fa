"""PlaneFactBlock against a real HTTP server that misbehaves on cue.

Covers the outage rules: 403/404 (nothing, one log line, back off), down
(unreachable, hangs, 429/502/503/504, junk JSON: last facts for the same
question, shared pause, one retry, one "back" line), Retry-After, refetch on
a new question, dedupe, payloads off, and arun not blocking the loop.
Back-off time runs on a fake clock, so nothing sleeps 30 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import logging
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

import fastaiagent as fa
from fastaiagent import trace
from fastaiagent.agent.composable import ComposableMemory
from fastaiagent.agent.memory_blocks import PlaneFactBlock
from fastaiagent.plane import client as plane
from fastaiagent.testing import CannedLLM

LOGGER = "fastaiagent.memory.plane"


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict -> JSON, bytes as is, None -> facts for the question
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to hang before answering
    trickle: float = 0.0  # seconds between body bytes
    hold: threading.Event | None = None  # answer once it is set (10 s at most)


@dataclass
class Seen:
    params: dict[str, str]
    headers: dict[str, str]


class FaultPlane:
    """A loopback plane: answers from a script, then with facts for the question."""

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.requests: list[Seen] = []
        self.release = threading.Event()  # ends every hang at teardown
        self.default: Callable[[dict[str, str]], Reply] = self.facts_for_question
        self.connections: list[Any] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a real plane

            def setup(self) -> None:
                super().setup()
                # Headers and body go out in two writes; don't let Nagle delay the second.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                owner.connections.append(self.connection)

            def do_GET(self) -> None:
                query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
                owner.requests.append(Seen(query, {k.lower(): v for k, v in self.headers.items()}))
                reply = owner.script.popleft() if owner.script else owner.default(query)
                if reply.delay:
                    owner.release.wait(reply.delay)
                if reply.hold is not None:
                    reply.hold.wait(10)
                body = reply.body
                if body is None:
                    body = owner.facts_for_question(query).body
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                try:
                    self.send_response(reply.status)
                    for key, value in reply.headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if reply.trickle:
                        for i in range(len(data)):
                            if owner.release.wait(reply.trickle):
                                return
                            self.wfile.write(data[i : i + 1])
                    else:
                        self.wfile.write(data)
                except OSError:
                    pass  # the client gave up (timeout); nothing to do

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @staticmethod
    def facts_for_question(query: dict[str, str]) -> Reply:
        question = query.get("query", "<none>")
        return Reply(body={"facts": [{"id": 1, "fact": f"fact for {question}"}]})

    def then(self, *replies: Reply) -> None:
        self.script.extend(replies)

    @property
    def count(self) -> int:
        return len(self.requests)

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        for conn in self.connections:  # drop kept-alive connections too
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class FakeClock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def server():
    fault = FaultPlane()
    yield fault
    fault.stop()


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(plane.backoff(), "clock", fake)
    return fake


# The read deadline of the loopback plane. A loaded CI machine once took over
# 0.5 s to answer a healthy read, so the deadline leaves room for that; the
# hang and trickle tests check the cut against it.
TIMEOUT = 1.5


@pytest.fixture
def connected(server, clock):
    fa.connect(api_key="test-key", target=server.url, timeout=TIMEOUT)
    yield server
    fa.disconnect()


def texts(messages) -> list[str]:
    return [m.content for m in messages]


def facts_of(messages) -> list[str]:
    assert len(messages) <= 1
    if not messages:
        return []
    heading, _preamble, *bullets = messages[0].content.split("\n")
    assert heading == "Curated facts:"
    return [json.JSONDecoder().raw_decode(b[2:])[0] for b in bullets]  # - "<fact>" (plane)


# -- the happy path ---------------------------------------------------------------------


def test_reads_curated_facts_with_the_key_and_settings(connected):
    block = PlaneFactBlock("agent-1", category="policy", max_facts=7, score_threshold=0.25)
    assert facts_of(block.render("refund policy?")) == ["fact for refund policy?"]
    seen = connected.requests[0]
    assert seen.headers["authorization"] == "Bearer test-key"
    assert seen.params == {
        "agent_id": "agent-1",
        "category": "policy",
        "max": "7",
        "query": "refund policy?",
        "score_threshold": "0.25",
    }


def test_max_facts_caps_what_is_injected_even_if_the_plane_sends_more(connected):
    many = {"facts": [{"id": i, "fact": f"fact {i}"} for i in range(10)]}
    connected.default = lambda q: Reply(body=many)
    assert facts_of(PlaneFactBlock("a", max_facts=3).render("q")) == ["fact 0", "fact 1", "fact 2"]


# -- 403 / 404 (acceptance 127, H11) -----------------------------------------------------


@pytest.mark.parametrize("status", [403, 404])
def test_refusal_injects_nothing_logs_once_per_agent_and_backs_off(connected, clock, caplog, status):
    connected.default = lambda q: Reply(status=status, body={"detail": "no"})
    users = [PlaneFactBlock("agent-x") for _ in range(3)]  # one block per user
    caplog.set_level(logging.INFO, logger=LOGGER)
    for turn in range(10):
        for block in users:
            assert block.render(f"question {turn}") == []
        clock.advance(1)
    assert connected.count == 1  # not one GET per turn, not one per user
    warnings = [r for r in caplog.records if r.name == LOGGER and str(status) in r.getMessage()]
    assert len(warnings) == 1
    # The refusal is believed for a while, then asked again once.
    clock.advance(PlaneFactBlock.denied_retry_seconds)
    assert users[0].render("again") == []
    assert users[1].render("again") == []
    assert connected.count == 2
    assert len([r for r in caplog.records if r.name == LOGGER]) == 1  # still one line


def test_refusal_of_one_agent_leaves_other_agents_alone(connected):
    connected.default = lambda q: (
        Reply(status=403) if q["agent_id"] == "denied" else FaultPlane.facts_for_question(q)
    )
    assert PlaneFactBlock("denied").render("q") == []
    assert facts_of(PlaneFactBlock("allowed").render("q")) == ["fact for q"]


def test_refusal_drops_facts_fetched_before(connected, clock):
    block = PlaneFactBlock("agent")
    assert facts_of(block.render("q")) == ["fact for q"]
    connected.then(Reply(status=403))
    assert block.render("q") == []
    assert block.render("q") == []


# -- outages (acceptance 128, 129) -------------------------------------------------


OUTAGES = {
    "429": Reply(status=429),
    "502": Reply(status=502, body=b"<html>Bad Gateway</html>"),
    "503": Reply(status=503),
    "504": Reply(status=504),
    "hang": Reply(delay=5.0),
    "junk-json": Reply(body=b"{not json"),
    "wrong-shape": Reply(body={"items": []}),
}


@pytest.mark.parametrize("kind", sorted(OUTAGES))
def test_outage_serves_last_facts_and_pauses_30_seconds(connected, clock, kind):
    block = PlaneFactBlock("agent")
    assert facts_of(block.render("q")) == ["fact for q"]
    connected.then(OUTAGES[kind])
    # A 5 s hang is cut by the timeout: answered, it would start no pause, and the
    # turns below would each ask again.
    assert facts_of(block.render("q")) == ["fact for q"]  # last facts, same question
    assert connected.count == 2
    for _ in range(50):
        clock.advance(0.5)  # 25 s of turns: no request
        assert facts_of(block.render("q")) == ["fact for q"]
    assert connected.count == 2
    clock.advance(5.1)  # past 30 s: one turn retries, and the plane is fine again
    assert facts_of(block.render("q")) == ["fact for q"]
    assert connected.count == 3


def test_a_trickling_plane_is_cut_off_by_the_total_deadline(connected, clock):
    block = PlaneFactBlock("agent")
    assert facts_of(block.render("q")) == ["fact for q"]
    # Each byte arrives well within the read timeout, but the whole answer would take ~10 s.
    connected.then(Reply(trickle=0.2))
    assert facts_of(block.render("q")) == ["fact for q"]
    assert plane.backoff().gate((connected.url, "agent")) == plane.PAUSED  # cut, not answered


def test_unreachable_plane_serves_last_facts_and_pauses(clock, server):
    fa.connect(api_key="k", target=server.url, timeout=TIMEOUT)  # the first read must be answered
    block = PlaneFactBlock("agent")
    assert facts_of(block.render("q")) == ["fact for q"]
    server.stop()  # nothing listens any more
    assert facts_of(block.render("q")) == ["fact for q"]
    assert plane.backoff().remaining((server.url, "agent")) == pytest.approx(30.0)
    fa.disconnect()


def test_unreachable_from_the_start_injects_nothing(clock):
    fa.connect(api_key="k", target="http://127.0.0.1:9", timeout=0.5)  # discard port
    block = PlaneFactBlock("agent")
    assert block.render("q") == []
    assert plane.backoff().gate(("http://127.0.0.1:9", "agent")) == plane.PAUSED
    fa.disconnect()


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_seconds_sets_the_pause(connected, clock, status):
    block = PlaneFactBlock("agent")
    connected.then(Reply(status=status, headers={"Retry-After": "120"}))
    block.render("q")
    clock.advance(119)
    block.render("q")
    assert connected.count == 1
    clock.advance(2)
    block.render("q")
    assert connected.count == 2


def test_retry_after_http_date_sets_the_pause(connected, clock, monkeypatch):
    wall = 1_800_000_000.0
    monkeypatch.setattr(plane.backoff(), "wall_clock", lambda: wall)
    when = email.utils.formatdate(wall + 200, usegmt=True)
    connected.then(Reply(status=503, headers={"Retry-After": when}))
    block = PlaneFactBlock("agent")
    block.render("q")
    clock.advance(199)
    block.render("q")
    assert connected.count == 1
    clock.advance(2)
    block.render("q")
    assert connected.count == 2


def test_retry_after_is_capped_at_ten_minutes(connected, clock):
    connected.then(Reply(status=429, headers={"Retry-After": "86400"}))
    block = PlaneFactBlock("agent")
    block.render("q")
    assert plane.backoff().remaining((connected.url, "agent")) == pytest.approx(600.0)
    clock.advance(601)
    block.render("q")
    assert connected.count == 2


def test_retry_after_seconds_class_attribute_sets_the_default_pause(connected, clock, monkeypatch):
    monkeypatch.setattr(PlaneFactBlock, "retry_after_seconds", 5.0)
    connected.then(Reply(status=503))
    block = PlaneFactBlock("agent")
    block.render("q")
    clock.advance(5.1)
    block.render("q")
    assert connected.count == 2


# -- shared pause, one retry (acceptance 130) -----------------------------------------


def test_pause_is_shared_by_every_block_of_the_same_plane_and_agent(connected, clock):
    alice, bob = PlaneFactBlock("agent"), PlaneFactBlock("agent")
    other_agent = PlaneFactBlock("another-agent")
    connected.then(Reply(status=503))
    assert alice.render("q") == []
    assert bob.render("q") == []  # bob is spared the wait: no request
    assert connected.count == 1
    assert facts_of(other_agent.render("q")) == ["fact for q"]  # a different key
    assert connected.count == 2


def test_only_one_turn_retries_when_the_pause_ends(connected, clock):
    blocks = [PlaneFactBlock("agent") for _ in range(12)]
    for block in blocks:
        block.render("q")  # each user has last facts for "q"
    assert connected.count == 12
    connected.then(Reply(status=503))
    blocks[0].render("q")
    clock.advance(31)
    connected.then(Reply(delay=0.3))  # the retry is slow; everyone else arrives meanwhile
    barrier = threading.Barrier(len(blocks))
    results: dict[int, list[str]] = {}

    def turn(i: int) -> None:
        barrier.wait()
        results[i] = facts_of(blocks[i].render("q"))

    threads = [threading.Thread(target=turn, args=(i,)) for i in range(len(blocks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert connected.count == 14  # 12 + the failure + exactly one retry
    assert all(r == ["fact for q"] for r in results.values())  # the rest served cached facts


def test_a_failed_retry_starts_a_new_pause(connected, clock):
    block = PlaneFactBlock("agent")
    connected.then(Reply(status=503), Reply(status=503))
    block.render("q")
    clock.advance(30.5)
    block.render("q")
    assert connected.count == 2
    clock.advance(29)
    block.render("q")
    assert connected.count == 2
    clock.advance(2)
    block.render("q")
    assert connected.count == 3


# -- logging (acceptance 131) --------------------------------------------------------


def test_one_warning_per_outage_and_one_line_when_the_plane_is_back(connected, clock, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    blocks = [PlaneFactBlock("agent") for _ in range(3)]
    connected.then(*(Reply(status=503) for _ in range(4)))
    for _ in range(4):  # four pause windows, each retry failing
        for _ in range(20):
            for block in blocks:
                block.render("q")
        clock.advance(31)
    assert connected.count == 4
    for block in blocks:
        block.render("q")  # the plane is back
        block.render("q")
    records = [r for r in caplog.records if r.name == LOGGER]
    warnings = [r for r in records if r.levelno == logging.WARNING]
    back = [r for r in records if "is back" in r.getMessage()]
    assert len(warnings) == 1
    assert len(back) == 1 and back[0].levelno == logging.INFO


# -- questions (acceptance 132, H11) -------------------------------------------------


def test_a_new_question_always_refetches(connected):
    block = PlaneFactBlock("agent", refresh_every=100)
    assert facts_of(block.render("first")) == ["fact for first"]
    assert facts_of(block.render("first")) == ["fact for first"]
    assert connected.count == 1  # cached per refresh_every
    assert facts_of(block.render("second")) == ["fact for second"]
    assert connected.count == 2


def test_refresh_every_rereads_every_n_renders(connected):
    block = PlaneFactBlock("agent", refresh_every=3)
    for _ in range(7):
        block.render("same question")
    assert connected.count == 3  # renders 1, 4 and 7


def test_refresh_every_one_reads_each_turn(connected):
    block = PlaneFactBlock("agent")
    for _ in range(3):
        block.render("same question")
    assert connected.count == 3


def test_during_a_pause_a_new_question_never_gets_another_questions_facts(connected, clock):
    block = PlaneFactBlock("agent")
    assert facts_of(block.render("about refunds")) == ["fact for about refunds"]
    connected.then(Reply(status=503))
    assert facts_of(block.render("about refunds")) == ["fact for about refunds"]
    assert block.render("about shipping") == []  # not the refunds facts
    assert facts_of(block.render("about refunds")) == ["fact for about refunds"]
    assert connected.count == 2
    clock.advance(31)
    assert facts_of(block.render("about shipping")) == ["fact for about shipping"]


def test_one_shared_block_keeps_each_users_question_during_a_pause(connected, clock):
    shared = PlaneFactBlock("agent")  # Memory(plane_agent_id=...) shares one block
    assert facts_of(shared.render("alice asks")) == ["fact for alice asks"]
    assert facts_of(shared.render("bob asks")) == ["fact for bob asks"]
    connected.then(Reply(status=502))
    assert facts_of(shared.render("alice asks")) == ["fact for alice asks"]
    assert facts_of(shared.render("bob asks")) == ["fact for bob asks"]
    assert shared.render("carol asks") == []
    assert connected.count == 3


# -- dedupe (acceptance 133) -----------------------------------------------------------


@pytest.fixture
def spans():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer(provider.get_tracer("test-plane"))
    yield exporter
    trace.set_tracer(None)


def test_duplicates_are_dropped_and_counted_on_the_span(connected, spans):
    connected.default = lambda q: Reply(
        body={
            "facts": [
                {"id": 1, "fact": "Refunds take 30 days", "importance": 0.9},
                {"id": 2, "fact": "Ships from Lyon"},
                {"id": 3, "fact": "refunds  TAKE 30 days"},
                {"id": 4, "fact": " REFUNDS take\t30 days "},
            ]
        }
    )
    memory = ComposableMemory(blocks=[PlaneFactBlock("agent")])
    messages = memory.get_context("refunds?")
    assert facts_of(messages) == ["Refunds take 30 days", "Ships from Lyon"]
    (span,) = [s for s in spans.get_finished_spans() if s.name == "memory.read.plane_facts"]
    assert span.attributes["memory.deduped_count"] == 2
    assert span.attributes["memory.rendered_count"] == 1


# -- payloads off (acceptance 134) -------------------------------------------------------


def test_question_is_not_sent_when_payloads_are_off(connected, monkeypatch):
    monkeypatch.setenv("FASTAIAGENT_TRACE_PAYLOADS", "0")
    block = PlaneFactBlock("agent")
    assert facts_of(block.render("my secret question")) == ["fact for <none>"]
    params = connected.requests[0].params
    assert "query" not in params and "score_threshold" not in params
    assert not any("secret" in v for v in params.values())
    monkeypatch.setenv("FASTAIAGENT_TRACE_PAYLOADS", "1")
    block.render("my question")
    assert connected.requests[1].params["query"] == "my question"


def test_query_conditioned_false_never_sends_the_question(connected):
    PlaneFactBlock("agent", query_conditioned=False).render("a question")
    assert "query" not in connected.requests[0].params


# -- async: the read never holds the event loop ----------------------------------------------


def test_arun_reads_the_plane_off_the_event_loop(connected):
    # The plane answers only once a coroutine on the event loop has seen the request:
    # a read holding the loop would wait for it until the read timeout, and fail.
    seen = threading.Event()
    connected.default = lambda q: Reply(body={"facts": [{"fact": "Refunds take 30 days"}]}, hold=seen)
    llm = CannedLLM("ok")
    agent = fa.Agent("a", llm, memory=ComposableMemory(blocks=[PlaneFactBlock("agent")]))

    async def main() -> Any:
        async def answer_when_asked() -> None:
            while not connected.count:
                await asyncio.sleep(0.005)
            seen.set()

        answering = asyncio.create_task(answer_when_asked())
        result = await agent.arun("refunds?")
        answering.cancel()
        return result

    result = asyncio.run(main())
    assert result.output == "ok"
    assert seen.is_set()
    assert any(
        t.startswith("Curated facts:\n") and '- "Refunds take 30 days' in t for t in texts(llm.calls[0])
    )


def test_the_agent_run_is_unharmed_by_an_outage(connected, clock):
    connected.default = lambda q: Reply(status=503)
    llm = CannedLLM("still answering")
    agent = fa.Agent("a", llm, memory=ComposableMemory(blocks=[PlaneFactBlock("agent")]))
    for _ in range(5):
        assert agent.run("hello").output == "still answering"
    assert connected.count == 1
