"""PlaneFactBlock and the plane connection: validation, parsing, the back-off rules."""

from __future__ import annotations

import copy
import email.utils
import re
import threading

import pytest

import fastaiagent as fa
from fastaiagent.agent.composable import ComposableMemory
from fastaiagent.agent.memory_blocks import PlaneFactBlock
from fastaiagent.plane import client as plane
from fastaiagent.plane.protocol import (
    PlaneFact,
    dedupe,
    parse_facts,
    parse_retry_after,
)
from fastaiagent.testing import CannedLLM


@pytest.fixture(autouse=True)
def _disconnected():
    plane.disconnect()
    yield
    plane.disconnect()


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# -- construction (item 125) -----------------------------------------------------


@pytest.mark.parametrize(
    ("agent_id", "error", "message"),
    [
        ("", ValueError, "agent_id cannot be empty"),
        ("   ", ValueError, "agent_id cannot be empty"),
        (None, TypeError, "agent_id must be a str, got NoneType None"),
        (42, TypeError, "agent_id must be a str, got int 42"),
    ],
)
def test_agent_id_is_required(agent_id, error, message):
    with pytest.raises(error, match=re.escape(message)):
        PlaneFactBlock(agent_id=agent_id)


def test_agent_id_has_no_default():
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'agent_id'"):
        PlaneFactBlock()  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("max_facts", "error", "message"),
    [
        (0, ValueError, "max_facts must be >= 1, got 0"),
        (-1, ValueError, "max_facts must be >= 1, got -1"),
        (201, ValueError, "max_facts must be <= 200, got 201"),
        (1000, ValueError, "max_facts must be <= 200, got 1000"),
        (True, TypeError, "max_facts must be an int, got bool True"),
        (2.5, TypeError, "max_facts must be an int, got float 2.5"),
        ("10", TypeError, "max_facts must be an int, got str '10'"),
    ],
)
def test_max_facts_must_be_in_1_to_200(max_facts, error, message):
    with pytest.raises(error, match=re.escape(message)):
        PlaneFactBlock("support", max_facts=max_facts)


@pytest.mark.parametrize("max_facts", [1, 50, 200])
def test_max_facts_bounds_are_accepted(max_facts):
    assert PlaneFactBlock("support", max_facts=max_facts).max_facts == max_facts


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"refresh_every": 0}, ValueError, "refresh_every must be >= 1, got 0"),
        ({"refresh_every": True}, TypeError, "refresh_every must be an int, got bool True"),
        ({"score_threshold": -0.1}, ValueError, "score_threshold must be >= 0.0, got -0.1"),
        ({"score_threshold": 1.5}, ValueError, "score_threshold must be <= 1.0, got 1.5"),
        ({"score_threshold": "0.5"}, TypeError, "score_threshold must be a number, got str '0.5'"),
        ({"category": ""}, ValueError, "category cannot be empty"),
        ({"category": 3}, TypeError, "category must be a str, got int 3"),
        ({"query_conditioned": "yes"}, TypeError, "query_conditioned must be True or False, got str"),
        ({"name": ""}, ValueError, "name cannot be empty"),
    ],
)
def test_other_settings_are_validated(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        PlaneFactBlock("support", **kwargs)


def test_defaults_match_the_spec():
    block = PlaneFactBlock("my-agent-id")
    assert block.name == "plane_facts"
    assert (block.category, block.max_facts, block.query_conditioned) == (None, 50, True)
    assert (block.score_threshold, block.refresh_every) == (0.0, 1)
    assert PlaneFactBlock.retry_after_seconds == 30.0


# -- not connected (item 126) ----------------------------------------------------


def test_not_connected_injects_nothing_and_the_agent_runs():
    block = PlaneFactBlock("support")
    assert block.render("what is the refund policy?") == []
    llm = CannedLLM("fine")
    agent = fa.Agent("a", llm, memory=ComposableMemory(blocks=[block]))
    assert agent.run("hello").output == "fine"
    assert not any("Curated facts" in (m.content or "") for m in llm.calls[0])


# -- connect ----------------------------------------------------------------------


def test_connect_validates_and_hides_the_key():
    with pytest.raises(ValueError, match="api_key"):
        fa.connect(api_key="", target="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="http"):
        fa.connect(api_key="k", target="ftp://plane")
    with pytest.raises(ValueError, match=re.escape("timeout must be > 0, got 0")):
        fa.connect(api_key="k", target="http://127.0.0.1:1", timeout=0)
    with pytest.raises(ValueError, match=re.escape("timeout must be <= 300.0, got 301")):
        fa.connect(api_key="k", target="http://127.0.0.1:1", timeout=301)
    with pytest.raises(TypeError, match=re.escape("timeout must be a number, got bool True")):
        fa.connect(api_key="k", target="http://127.0.0.1:1", timeout=True)
    with pytest.raises(TypeError, match=re.escape("api_key must be a str, got int 42")):
        fa.connect(api_key=42, target="http://127.0.0.1:1")  # type: ignore[arg-type]
    conn = fa.connect(api_key="secret-key", target="https://plane.example.com/")
    assert conn.target == "https://plane.example.com"
    assert "secret-key" not in repr(conn)
    assert plane.is_connected()
    fa.disconnect()
    assert plane.connection() is None


def test_a_connection_can_be_made_and_passed_without_connect(monkeypatch):
    conn = plane.plane_connection(api_key="k", target="https://plane.example.com/", timeout=2)
    assert (conn.target, conn.api_key, conn.timeout) == ("https://plane.example.com", "k", 2.0)
    assert plane.connection() is None  # made, not made the default
    assert PlaneFactBlock("support", plane=conn).plane is conn
    assert PlaneFactBlock("support").plane is None  # the connect() default, read at each turn
    assert fa.Memory(plane_agent_id="support", plane=conn).config.plane is conn
    monkeypatch.setenv("FASTAIAGENT_API_KEY", "env-key")
    monkeypatch.setenv("FASTAIAGENT_TARGET", "http://127.0.0.1:9")
    assert plane.plane_connection().api_key == "env-key"
    assert plane.connection() is None


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"target": "ftp://plane", "api_key": "k"}, ValueError, "http(s) URL"),
        ({"target": "", "api_key": "k"}, ValueError, "target cannot be empty"),
        ({"target": "http://p", "api_key": " "}, ValueError, "api_key cannot be empty"),
        ({"target": "http://p", "api_key": 3}, TypeError, "api_key must be a str, got int 3"),
        ({"target": "http://p", "api_key": "k", "timeout": 0}, ValueError, "timeout must be > 0"),
    ],
)
def test_a_connection_is_checked_when_made(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        plane.PlaneConnection(**kwargs)


def test_plane_must_be_a_connection_and_needs_plane_agent_id():
    with pytest.raises(TypeError, match="plane= must be a PlaneConnection"):
        PlaneFactBlock("support", plane="https://plane.example.com")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="plane= must be a PlaneConnection"):
        fa.Memory(plane_agent_id="support", plane={"target": "x"})  # type: ignore[arg-type]
    conn = plane.PlaneConnection(target="https://plane.example.com", api_key="k")
    with pytest.raises(ValueError, match="set plane_agent_id="):
        fa.Memory(plane=conn)


def test_connect_reads_the_environment(monkeypatch):
    monkeypatch.setenv("FASTAIAGENT_API_KEY", "env-key")
    monkeypatch.setenv("FASTAIAGENT_TARGET", "http://127.0.0.1:9")
    conn = fa.connect()
    assert (conn.api_key, conn.target) == ("env-key", "http://127.0.0.1:9")


def test_connect_again_clears_every_pause():
    fa.connect(api_key="k", target="http://127.0.0.1:9")
    plane.backoff().failed(("http://127.0.0.1:9", "a"), 30, "HTTP 503")
    assert plane.backoff().gate(("http://127.0.0.1:9", "a")) == plane.PAUSED
    fa.connect(api_key="k", target="http://127.0.0.1:9")
    assert plane.backoff().gate(("http://127.0.0.1:9", "a")) == plane.FETCH


# -- parsing ------------------------------------------------------------------------


def test_retry_after_seconds_and_http_date():
    now = 1_700_000_000.0
    assert parse_retry_after("120", now) == 120.0
    assert parse_retry_after(" 7 ", now) == 7.0
    date = email.utils.formatdate(now + 90, usegmt=True)
    assert parse_retry_after(date, now) == pytest.approx(90.0, abs=1.0)
    assert parse_retry_after(email.utils.formatdate(now - 50, usegmt=True), now) == 0.0
    assert parse_retry_after("soon", now) is None
    assert parse_retry_after("", now) is None
    assert parse_retry_after(None, now) is None


def test_parse_facts_skips_bad_entries_and_rejects_junk():
    body = (
        b'{"facts": [{"id": 1, "fact": " Refunds take 30 days ", "category": "policy",'
        b' "importance": 0.9, "score": 0.5}, {"fact": ""}, "nope", {"id": 3},'
        b' {"id": 4, "fact": "Ships from Lyon", "importance": "high"}]}'
    )
    facts = parse_facts(body)
    assert [f.fact for f in facts] == ["Refunds take 30 days", "Ships from Lyon"]
    assert facts[0] == PlaneFact("Refunds take 30 days", 1, "policy", 0.9, 0.5)
    assert facts[1].importance is None
    junk = {
        b"<html>502</html>": "not JSON",
        b'{"facts": 3}': 'expected an object with a "facts" list',
        b"[]": 'expected an object with a "facts" list',
        b"\xff\xfe": "not JSON",
        b'{"facts": ' + b"[" * 100_000: "not JSON: nested too deeply",
    }
    for bad, message in junk.items():
        with pytest.raises(ValueError, match=message):
            parse_facts(bad)


def test_dedupe_ignores_case_and_spacing_and_keeps_the_first():
    facts = [
        PlaneFact("Refunds take 30 days", id=1),
        PlaneFact("refunds   TAKE 30 days", id=2),
        PlaneFact("Ships from Lyon", id=3),
        PlaneFact("  REFUNDS take 30\tdays ", id=4),
    ]
    kept, dropped = dedupe(facts)
    assert [f.id for f in kept] == [1, 3]
    assert dropped == 2


# -- the shared back-off registry ----------------------------------------------------


def test_registry_pause_then_exactly_one_probe():
    clock = FakeClock()
    registry = plane.BackoffRegistry(clock=clock)
    key = ("http://plane", "agent")
    assert registry.gate(key) == plane.FETCH
    assert registry.failed(key, 30, "HTTP 503") is True  # the outage starts
    assert registry.gate(key) == plane.PAUSED
    clock.advance(29.9)
    assert registry.gate(key) == plane.PAUSED
    assert registry.remaining(key) == pytest.approx(0.1)
    clock.advance(0.2)
    assert registry.gate(key) == plane.PROBE
    assert registry.gate(key) == plane.PAUSED  # everyone else waits for the probe
    assert registry.failed(key, 30, "HTTP 503") is False  # same outage, no new warning
    clock.advance(31)
    assert registry.gate(key) == plane.PROBE
    assert registry.succeeded(key) == plane.PAUSED
    assert registry.gate(key) == plane.FETCH


def test_registry_keys_are_per_plane_and_agent():
    registry = plane.BackoffRegistry(clock=FakeClock())
    registry.failed(("http://a", "agent"), 30, "timeout")
    assert registry.gate(("http://a", "other-agent")) == plane.FETCH
    assert registry.gate(("http://b", "agent")) == plane.FETCH


def test_registry_denial_is_reported_once_per_reason():
    registry = plane.BackoffRegistry(clock=FakeClock())
    key = ("http://a", "agent")
    assert registry.denied(key, 300, "403") is True
    assert registry.denied(key, 300, "403") is False
    assert registry.denied(key, 300, "404") is True
    assert registry.gate(key) == plane.DENIED


def test_registry_probe_is_released_when_it_reports_nothing():
    clock = FakeClock()
    registry = plane.BackoffRegistry(clock=clock)
    key = ("http://a", "agent")
    registry.failed(key, 1, "timeout")
    clock.advance(2)
    assert registry.gate(key) == plane.PROBE
    registry.release(key)
    assert registry.gate(key) == plane.PROBE


def test_only_one_of_many_threads_gets_the_probe():
    clock = FakeClock()
    registry = plane.BackoffRegistry(clock=clock)
    key = ("http://a", "agent")
    registry.failed(key, 30, "HTTP 502")
    clock.advance(31)
    results: list[str] = []
    barrier = threading.Barrier(16)

    def turn() -> None:
        barrier.wait()
        results.append(registry.gate(key))

    threads = [threading.Thread(target=turn) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(plane.PROBE) == 1
    assert results.count(plane.PAUSED) == 15


# -- copies and pushed agents (item 101) ---------------------------------------------------


def test_copies_share_settings_not_cache():
    block = PlaneFactBlock("support", category="policy", max_facts=5)
    for clone in (block.isolated_copy(), copy.deepcopy(block)):
        assert (clone.agent_id, clone.category, clone.max_facts) == ("support", "policy", 5)
        assert clone._lock is not block._lock


def test_to_dict_carries_memory_enabled_only_with_memory():
    llm = CannedLLM("ok")
    bare = fa.Agent("bare", llm).to_dict()
    assert "memory_enabled" not in bare
    for memory in (
        fa.AgentMemory(),
        ComposableMemory(blocks=[PlaneFactBlock("support")]),
        fa.Memory(plane_agent_id="support"),
    ):
        data = fa.Agent("with-memory", llm, memory=memory).to_dict()
        assert data["memory_enabled"] is True
        # Block-level tuning stays in the SDK code, not in the pushed payload.
        assert "plane_facts" not in str(data) and "max_facts" not in str(data)
