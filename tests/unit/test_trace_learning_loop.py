"""`fastaiagent learn`: mining traced runs into durable facts, listing and superseding them."""

from __future__ import annotations

import json
import re

import pytest
from fake_llm_server import FakeLLMServer, Say
from typer.testing import CliRunner

from fastaiagent import Agent, trace
from fastaiagent.cli import _register, app
from fastaiagent.learn import SOURCE_TRACES, Fact, MemoryStore
from fastaiagent.learn.loop import learn_from_traces
from fastaiagent.llm.message import Message
from fastaiagent.testing import CannedLLM, FunctionLLM
from fastaiagent.trace import TraceStore

FACTS = {
    "Always cite sources for token-cost claims": "Always cite sources for token-cost claims",
    "Keep reports under 800 words": "Keep reports under 800 words",
}


@pytest.fixture(autouse=True)
def _tracing_off_after():
    yield
    trace.shutdown()


def _extractor(replace_first: bool = False) -> FunctionLLM:
    """Answers the extraction prompt with the instruction the user gave in the run."""

    def answer(messages: list[Message]) -> str:
        body = messages[-1].content or ""
        said = body.split("<<<\n", 1)[1].rsplit("\n>>>", 1)[0]
        if said.startswith("boom"):
            raise RuntimeError("model overloaded")
        facts = []
        for text in FACTS:
            if text.lower() in said.lower():
                replaces = "F1" if replace_first and "F1:" in body else None
                facts.append({"fact": text, "replaces": replaces})
        return json.dumps({"facts": facts})

    return FunctionLLM(answer)


def _seed_runs(tmp_path, *inputs: str, agent_name: str = "writer") -> list[str]:
    trace.setup(store_path=tmp_path / "traces.db")
    agent = Agent(agent_name, CannedLLM("sure"))
    ids = [agent.run(text).trace_id for text in inputs]
    trace.shutdown()
    return [i for i in ids if i]


def test_runs_are_mined_into_agent_facts_with_their_trace(tmp_path):
    ids = _seed_runs(
        tmp_path,
        "Please always cite sources for token-cost claims",
        "hello there",
        "Keep reports under 800 words, thanks",
    )
    store = MemoryStore(tmp_path / "facts.db")
    report = learn_from_traces(_extractor(), location=store, trace_store=tmp_path / "traces.db")
    assert report.runs_seen == 3 and report.runs_mined == 3 and not report.failures
    facts = {f.fact: f for f in store.list_active("agent", "writer")}
    assert set(facts) == set(FACTS)
    cite = facts["Always cite sources for token-cost claims"]
    assert cite.confidence == 1.0 and cite.source == SOURCE_TRACES
    assert cite.source_trace_id == ids[0]
    assert facts["Keep reports under 800 words"].source_trace_id == ids[2]
    assert store.list_active("user", "*") == []  # nothing personal by default


def test_mined_runs_are_skipped_next_time_unless_remined(tmp_path):
    _seed_runs(tmp_path, "Keep reports under 800 words")
    store = MemoryStore(tmp_path / "facts.db")
    llm = _extractor()
    learn_from_traces(llm, location=store, trace_store=tmp_path / "traces.db")
    second = learn_from_traces(llm, location=store, trace_store=tmp_path / "traces.db")
    assert second.runs_mined == 0 and second.runs_skipped == 1 and llm.call_count == 1
    third = learn_from_traces(llm, location=store, trace_store=tmp_path / "traces.db", remine=True)
    assert third.runs_mined == 1 and len(store.list_active("agent", "writer")) == 1  # idempotent


def test_user_and_project_scopes_need_allow_personal_and_an_id(tmp_path):
    _seed_runs(tmp_path, "Keep reports under 800 words")
    store = MemoryStore(tmp_path / "facts.db")
    kwargs = {"location": store, "trace_store": tmp_path / "traces.db"}
    for scope in ("user", "project"):
        with pytest.raises(PermissionError, match="allow_personal"):
            learn_from_traces(_extractor(), scope=scope, scope_id="alice", **kwargs)
        with pytest.raises(ValueError, match="needs a scope id"):
            learn_from_traces(_extractor(), scope=scope, allow_personal=True, **kwargs)
    for bad in ("", "   "):
        with pytest.raises(ValueError, match="empty scope id"):
            learn_from_traces(_extractor(), scope_id=bad, **kwargs)
    with pytest.raises(ValueError, match="wildcard"):
        learn_from_traces(_extractor(), scope_id="*", **kwargs)
    with pytest.raises(ValueError, match="unknown scope"):
        learn_from_traces(_extractor(), scope="galaxy", **kwargs)
    assert store.browse(limit=10) == []
    report = learn_from_traces(
        _extractor(), scope="user", scope_id="alice", allow_personal=True, **kwargs
    )
    assert report.runs_mined == 1
    assert [f.fact for f in store.list_active("user", "alice")] == ["Keep reports under 800 words"]
    assert store.list_active("user", "bob") == []


def test_a_correction_supersedes_the_known_fact(tmp_path):
    _seed_runs(tmp_path, "Always cite sources for token-cost claims")
    store = MemoryStore(tmp_path / "facts.db")
    learn_from_traces(_extractor(), location=store, trace_store=tmp_path / "traces.db")
    _seed_runs(tmp_path, "Actually: keep reports under 800 words")  # same store file, newer run
    report = learn_from_traces(
        _extractor(replace_first=True), location=store, trace_store=tmp_path / "traces.db"
    )
    assert len(report.facts_superseded) == 1
    old_id, new_id = report.facts_superseded[0]
    assert store.get(old_id).superseded_by == new_id
    assert [f.fact for f in store.list_active("agent", "writer")] == ["Keep reports under 800 words"]


def test_a_failing_run_is_reported_and_retried_next_pass(tmp_path):
    _seed_runs(tmp_path, "boom: this one fails", "Keep reports under 800 words")
    store = MemoryStore(tmp_path / "facts.db")
    report = learn_from_traces(_extractor(), location=store, trace_store=tmp_path / "traces.db")
    assert len(report.failures) == 1 and "model overloaded" in report.failures[0][1]
    assert report.runs_mined == 1
    again = learn_from_traces(_extractor(), location=store, trace_store=tmp_path / "traces.db")
    assert again.runs_mined == 0 and len(again.failures) == 1  # only the failed run is retried


def test_agent_filter_dry_run_and_progress(tmp_path):
    _seed_runs(tmp_path, "Keep reports under 800 words", agent_name="writer")
    _seed_runs(tmp_path, "Always cite sources for token-cost claims", agent_name="critic")
    store = MemoryStore(tmp_path / "facts.db")
    ticks: list[tuple[int, int]] = []
    report = learn_from_traces(
        _extractor(),
        location=store,
        trace_store=tmp_path / "traces.db",
        agent="critic",
        dry_run=True,
        on_progress=lambda done, total: ticks.append((done, total)),
    )
    assert ticks == [(1, 2), (2, 2)]
    assert report.proposed == [
        (report.proposed[0][0], "agent:critic", "Always cite sources for token-cost claims")
    ]
    assert store.browse(limit=10) == []  # dry run wrote nothing
    assert TraceStore(tmp_path / "traces.db").mined_trace_ids([report.proposed[0][0]]) == set()


def test_no_runs_means_no_llm_calls(tmp_path):
    llm = _extractor()
    report = learn_from_traces(llm, location=MemoryStore(tmp_path / "f.db"), trace_store=tmp_path / "none.db")
    assert report.runs_seen == 0 and llm.call_count == 0


# -- the CLI ----------------------------------------------------------------------


@pytest.fixture
def cli():
    _register()
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


def test_cli_mines_with_an_llm_client_and_a_progress_bar(tmp_path, cli):
    _seed_runs(tmp_path, "Keep reports under 800 words")
    location = f"sqlite:///{tmp_path / 'facts.db'}"
    with FakeLLMServer() as server:
        server.default = Say('{"facts": [{"fact": "Keep reports under 800 words", "replaces": null}]}')
        result = cli(
            "learn",
            "--location", location,
            "--trace-db", str(tmp_path / "traces.db"),
            "--provider", "openai-compatible",
            "--base-url", server.openai_url,
            "--model", "fake-model",
        )
    assert result.exit_code == 0, result.output
    assert "1 mined" in result.output and "1 facts learned" in result.output
    facts = MemoryStore(tmp_path / "facts.db").list_active("agent", "writer")
    assert [f.fact for f in facts] == ["Keep reports under 800 words"]


def test_cli_refuses_personal_scopes_and_empty_ids(tmp_path, cli):
    location = f"sqlite:///{tmp_path / 'facts.db'}"
    result = cli("learn", "--location", location, "--subject", "user:alice", "--model", "m")
    assert result.exit_code == 2 and "--allow-personal" in result.output
    result = cli("learn", "--location", location, "--subject", "agent:", "--model", "m")
    assert result.exit_code == 2 and "empty scope id" in result.output
    result = cli("learn", "--location", location)
    assert result.exit_code == 2 and "--model" in result.output


def test_cli_list_filters_before_it_limits(tmp_path, cli):
    store = MemoryStore(tmp_path / "facts.db")
    for i in range(3):
        store.add(Fact(f"alice fact {i}", scope="user", scope_id="alice", created_at=100 + i))
    for i in range(30):  # newer facts of someone else would crowd a limit-then-filter listing
        store.add(Fact(f"bob fact {i}", scope="user", scope_id="bob", created_at=1_000 + i))
    location = f"sqlite:///{tmp_path / 'facts.db'}"
    result = cli("learn", "list", "--location", location, "--subject", "user:alice", "--limit", "2")
    assert result.exit_code == 0, result.output
    assert re.findall(r"alice fact \d", result.output) == ["alice fact 2", "alice fact 1"]
    assert "bob" not in result.output
    everyone = cli("learn", "list", "--location", location, "--subject", "user", "--limit", "40")
    assert len(re.findall(r"(?:alice|bob) fact \d+", everyone.output)) == 33
    bad = cli("learn", "list", "--location", location, "--subject", "galaxy")
    assert bad.exit_code == 2


def test_cli_supersede_and_show_superseded(tmp_path, cli):
    store = MemoryStore(tmp_path / "facts.db")
    old = store.add(Fact("Prefers email", scope="user", scope_id="alice"))
    new = store.add(Fact("Prefers Slack", scope="user", scope_id="alice"))
    other = store.add(Fact("Prefers phone", scope="user", scope_id="bob"))
    location = f"sqlite:///{tmp_path / 'facts.db'}"
    result = cli("learn", "supersede", str(old), str(new), "--location", location)
    assert result.exit_code == 0 and f"#{old} superseded by #{new}" in result.output
    assert "Prefers email" not in cli("learn", "list", "--location", location).output
    history = cli("learn", "list", "--location", location, "--show-superseded").output
    assert "Prefers email" in history and f"superseded → #{new}" in history
    cross = cli("learn", "supersede", str(new), str(other), "--location", location)
    assert cross.exit_code == 1 and f"no fact #{new} in user:bob" in cross.output  # NEW's subject
    assert "alice" not in cross.output and "Slack" not in cross.output
    missing = cli("learn", "supersede", "999", str(new), "--location", location)
    assert missing.exit_code == 1 and "no fact #999" in missing.output
    assert store.get(new).superseded_by is None and store.get(other).superseded_by is None


def test_agent_scope_asks_for_operational_knowledge_not_personal_facts(tmp_path):
    from fastaiagent.learn.extractor import EXTRACTION_PROMPT
    from fastaiagent.learn.loop import AGENT_KNOWLEDGE_PROMPT

    _seed_runs(tmp_path, "Keep reports under 800 words")
    llm = _extractor()
    learn_from_traces(llm, location=MemoryStore(tmp_path / "a.db"), trace_store=tmp_path / "traces.db")
    assert llm.calls[-1][0].content == AGENT_KNOWLEDGE_PROMPT
    assert "never extract personal information" in AGENT_KNOWLEDGE_PROMPT
    learn_from_traces(
        llm,
        location=MemoryStore(tmp_path / "u.db"),
        trace_store=tmp_path / "traces.db",
        scope="user",
        scope_id="alice",
        allow_personal=True,
        remine=True,
    )
    assert llm.calls[-1][0].content == EXTRACTION_PROMPT


def test_the_loop_reads_a_record_facts_tool_call(tmp_path):
    from fastaiagent.learn.extractor import RECORD_FACTS_TOOL
    from fastaiagent.testing import tool_call

    ids = _seed_runs(tmp_path, "Keep reports under 800 words")
    store = MemoryStore(tmp_path / "facts.db")
    llm = CannedLLM(tool_call("record_facts", facts=[{"fact": "Keep reports under 800 words"}]))
    report = learn_from_traces(llm, location=store, trace_store=tmp_path / "traces.db")
    assert report.runs_mined == 1 and not report.failures
    assert llm.tools_offered == [[RECORD_FACTS_TOOL]]
    facts = store.list_active("agent", "writer")
    assert [(f.fact, f.source_trace_id) for f in facts] == [("Keep reports under 800 words", ids[0])]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"limit": "5"}, TypeError, "limit must be an int, got str '5'"),
        ({"limit": 0}, ValueError, "limit must be >= 1, got 0"),
        ({"remine": "yes"}, TypeError, "remine must be True or False"),
        ({"dry_run": 1}, TypeError, "dry_run must be True or False"),
        ({"allow_personal": "no"}, TypeError, "allow_personal must be True or False"),
        ({"scope_id": 7}, TypeError, "scope_id must be a str, got int"),
        ({"project_id": None}, TypeError, "project_id must be a str, got NoneType"),
        ({"agent": ""}, ValueError, "agent cannot be empty"),
        ({"on_progress": "bar"}, TypeError, "on_progress must be callable, got str"),
        ({"llm": "gpt-4.1"}, TypeError, "llm must be an LLMClient or BaseLLM, got str"),
    ],
)
def test_bad_loop_arguments_fail_before_any_work(tmp_path, kwargs, error, match):
    arguments = {"llm": _extractor(), "location": MemoryStore(tmp_path / "f.db"), **kwargs}
    with pytest.raises(error, match=match):
        learn_from_traces(arguments.pop("llm"), trace_store=tmp_path / "traces.db", **arguments)


def test_cli_subject_says_where_facts_go_and_the_old_scope_pair_still_works(tmp_path, cli):
    _seed_runs(tmp_path, "Keep reports under 800 words")
    location = f"sqlite:///{tmp_path / 'facts.db'}"
    common = ("--location", location, "--trace-db", str(tmp_path / "traces.db"), "--provider",
              "openai-compatible", "--model", "fake-model", "--allow-personal", "--remine")  # fmt: skip
    with FakeLLMServer() as server:
        server.default = Say('{"facts": [{"fact": "Keep reports under 800 words", "replaces": null}]}')
        new = cli("learn", *common, "--base-url", server.openai_url, "--subject", "user:alice")
        old = cli("learn", *common, "--base-url", server.openai_url, "--scope", "user", "--scope-id", "bob")
        other = cli("learn", *common, "--base-url", server.openai_url, "--agent-id", "someone-else")
    assert new.exit_code == old.exit_code == other.exit_code == 0, (new.output, old.output, other.output)
    assert "deprecated" not in new.output and "use --subject" in old.stderr
    store = MemoryStore(tmp_path / "facts.db")
    for user in ("alice", "bob"):
        assert [f.fact for f in store.list_active("user", user)] == ["Keep reports under 800 words"]
    assert "0 mined" in other.output and store.list_active("agent", "writer") == []  # only that agent's runs
