"""forget of a user erases their runs from the local trace store (the file the UI reads)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fastaiagent import Agent, Memory, RunContext, trace
from fastaiagent.testing import CannedLLM, FunctionLLM
from fastaiagent.trace import TraceStore


@dataclass
class Session:
    user_id: str


def ctx(user: str) -> RunContext:
    return RunContext(state=Session(user))


@pytest.fixture
def traces(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "traces.db"
    trace.setup(store_path=path, batch_delay_ms=20)
    yield path
    trace.shutdown()


def stored_text(path: Path) -> str:
    """Every stored span and run row, as one text (what the UI could ever show)."""
    with sqlite3.connect(path) as conn:
        spans = [bytes(row[0]).decode() for row in conn.execute("SELECT spans FROM span_batches")]
        runs = [row[0] for row in conn.execute("SELECT attributes FROM runs")]
    return "\n".join(spans + runs)


def extractor() -> FunctionLLM:
    def reply(messages):
        said = messages[-1].content or ""
        if "email" in said:
            return '{"facts": [{"fact": "Email is on file", "replaces": null}]}'
        return '{"facts": []}'

    return FunctionLLM(reply)


def test_forget_erases_the_users_runs_and_keeps_everyone_elses(traces: Path) -> None:
    mem = Memory(agent_id="support", user_id=lambda c: c.state.user_id, learn=extractor())
    agent = Agent(name="support", llm=CannedLLM("noted"), memory=mem)
    for _ in range(2):
        agent.run("my email is bob@example.com", context=ctx("bob"))
        agent.run("my email is carol@example.org", context=ctx("alice"))
    mem.persist("Prefers the phone", tier="user", id="bob")  # a trace of its own
    mem.flush(timeout=10)
    trace.flush()
    before = stored_text(traces)
    assert "bob@example.com" in before and '"memory.user_id":"bob"' in before
    runs_before = TraceStore(traces).count_runs()

    mem.forget(tier="user", id="bob")

    after = stored_text(traces)
    assert "bob@example.com" not in after
    assert "Prefers the phone" not in after
    assert '"bob"' not in after
    assert "carol@example.org" in after  # alice's runs stay, learning included
    store = TraceStore(traces)
    runs = store.list_runs(limit=100)
    assert runs and all(r.attributes.get("memory.user_id") != "bob" for r in runs)
    assert len(runs) < runs_before
    for run in runs:  # the Traces page can still open every run that is left
        assert store.get_trace(run.trace_id)


def test_the_forget_span_does_not_write_the_id_back(traces: Path) -> None:
    mem = Memory(user_id=lambda c: c.state.user_id)
    Agent(name="a", llm=CannedLLM("ok"), memory=mem).run("hello from dave", context=ctx("dave"))
    mem.forget(tier="user", id="dave")
    trace.flush()
    text = stored_text(traces)
    assert "dave" not in text
    assert "memory.forget" in text  # the forget itself is still on record


def test_erase_user_confirms_the_attribute_not_just_the_text(tmp_path: Path) -> None:
    """A span whose *text* says "bob" but that served alice stays; a global-tier
    subject named like the user is not the user."""
    path = tmp_path / "t.db"
    trace.setup(store_path=path, batch_delay_ms=20)
    try:
        with trace.span("agent.run", {"memory.user_id": "alice", "agent.input": '"memory.user_id":"bob"'}):
            pass
        with trace.span("memory.persist", {"memory.scope": "agent", "memory.scope_id": "bob"}):
            pass
        with trace.span("memory.persist", {"memory.scope": "user", "memory.scope_id": "bob"}):
            pass
        trace.flush()
    finally:
        trace.shutdown()
    store = TraceStore(path)
    assert store.erase_user("bob") == 1
    left = sorted(json.dumps(r.attributes, sort_keys=True) for r in store.list_runs())
    assert left == [
        '{"agent.input": "\\"memory.user_id\\":\\"bob\\"", "memory.user_id": "alice"}',
        '{"memory.scope": "agent", "memory.scope_id": "bob"}',
    ]
    with pytest.raises(ValueError, match="one user id"):
        store.erase_user("*")


def test_forget_erases_the_default_trace_file_when_tracing_is_off(tmp_path, monkeypatch) -> None:
    path = tmp_path / "default-traces.db"
    monkeypatch.setenv("FASTAIAGENT_TRACE_DB", str(path))
    mem = Memory(user_id=lambda c: c.state.user_id)
    trace.setup(batch_delay_ms=20)  # the default file, as `fastaiagent ui` reads it
    Agent(name="a", llm=CannedLLM("ok"), memory=mem).run("erin's secret", context=ctx("erin"))
    trace.shutdown()
    assert "erin's secret" in stored_text(path)
    mem.forget(tier="user", id="erin")
    assert "erin" not in stored_text(path)
