"""The Memory page and `fastaiagent learn` against the real Postgres and Redis (acceptance H16)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from fastaiagent import Agent, trace
from fastaiagent.cli import _register, app
from fastaiagent.facts.store import FactStore
from fastaiagent.learn import Fact
from fastaiagent.learn.loop import learn_from_traces
from fastaiagent.testing import FunctionLLM
from fastaiagent.ui import create_app

SERVERS = [
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("redis", marks=pytest.mark.redis),
]
EXTRACTED = '{"facts": [{"fact": "Answers in British English", "replaces": null}]}'


@pytest.fixture(params=SERVERS)
def store(request, tmp_path) -> Iterator[FactStore]:
    if request.param == "postgres":
        from fastaiagent.facts.postgres.store import PostgresFactStore

        url, table = request.getfixturevalue("postgres_url"), request.getfixturevalue("pg_table")
        s: FactStore = PostgresFactStore(url, table=table, max_pool_size=2)
    else:
        from fastaiagent.facts.redis.store import RedisFactStore

        url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
        s = RedisFactStore(url, prefix=prefix)
    yield s
    s.close()


def _seed(store: FactStore) -> tuple[int, int]:
    store.add(Fact("Return policy is 30 days", scope="agent", scope_id="assistant"))
    old = store.add(Fact("Prefers email", scope="user", scope_id="alice"))
    new = store.update(Fact("Prefers Slack", scope="user", scope_id="alice"), old)
    store.add(Fact("Has a beagle", scope="user", scope_id="bob"))
    return old, new


def test_memory_page_over_a_server_store(store, tmp_path):
    old, new = _seed(store)
    client = TestClient(create_app(store, trace_db=tmp_path / "t.db"), base_url="http://127.0.0.1")
    html = client.get("/memory").text
    assert "user:alice (1)" in html and "user:bob (1)" in html and "agent:assistant (1)" in html
    assert "Prefers Slack" in html and "Prefers email" not in html
    history = client.get("/memory?superseded=1").text
    # A superseded fact links its own timeline, at the version that replaced it.
    assert f"superseded → <a href=\"/memory/facts/{old}#version-{new}\">#{new}</a>" in history
    timeline = client.get(f"/memory/facts/{old}").text
    assert f'id="version-{new}"' in timeline and "Prefers email" in timeline
    assert f'by <a class="successor-link" href="#version-{new}">#{new}</a>' in timeline
    only_bob = client.get("/memory?scope=user:bob").text
    assert "Has a beagle" in only_bob and "Prefers" not in only_bob


def test_learn_loop_writes_to_a_server_store(store, tmp_path):
    trace.setup(store_path=tmp_path / "traces.db")
    run = Agent("concierge", FunctionLLM(lambda m: "ok")).run("Please answer in British English")
    trace.shutdown()
    report = learn_from_traces(
        FunctionLLM(lambda m: EXTRACTED), location=store, trace_store=tmp_path / "traces.db"
    )
    assert report.runs_mined == 1
    (fact,) = store.list_active("agent", "concierge")
    assert fact.fact == "Answers in British English"
    assert fact.source_trace_id == run.trace_id and fact.confidence == 1.0


@pytest.fixture(params=SERVERS)
def location(request, own_location) -> tuple[str, str]:
    """A location URL (a table / key prefix of the test's own, named in the URL) and
    a subject id."""
    return own_location(request.param), f"ui-test-{uuid.uuid4().hex[:10]}"


def test_learn_cli_lists_and_supersedes_at_a_url_location(location):
    url, subject = location
    from fastaiagent.learn import make_fact_store

    s = make_fact_store(url)
    old = s.add(Fact("Uses vim", scope="user", scope_id=subject))
    new = s.add(Fact("Uses emacs", scope="user", scope_id=subject))
    s.close()
    _register()
    runner = CliRunner()
    scope = f"user:{subject}"
    listed = runner.invoke(app, ["learn", "list", "--location", url, "--subject", scope])
    assert listed.exit_code == 0, listed.output
    assert re.findall(r"Uses \w+", listed.output) == ["Uses emacs", "Uses vim"]
    done = runner.invoke(app, ["learn", "supersede", str(old), str(new), "--location", url])
    assert done.exit_code == 0, done.output
    after = runner.invoke(app, ["learn", "list", "--location", url, "--subject", scope])
    assert re.findall(r"Uses \w+", after.output) == ["Uses emacs"]
