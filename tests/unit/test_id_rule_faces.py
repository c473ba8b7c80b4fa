"""One id rule at the faces (issue #46): the CLI, the Memory page, MCP, the plane and
the framework adapters refuse the ids a verb refuses, with the reason, before a
store is touched: a NUL, a lone surrogate, over 512 characters, only whitespace."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from fastaiagent import Memory
from fastaiagent.cli import _register, app
from fastaiagent.errors import InvalidValueError
from fastaiagent.learn import Fact, MemoryStore
from fastaiagent.ui import create_app

BASE = "http://127.0.0.1"


@pytest.fixture
def store(tmp_path: Path) -> Any:
    made = MemoryStore(tmp_path / "facts.db")
    made.add(Fact("Prefers tea", scope="user", scope_id="alice"))
    made.add(Fact("Ships on Monday", scope="agent", scope_id="support"))
    yield made
    made.close()


def _untouched(store: MemoryStore) -> None:
    assert sorted((s.scope, s.scope_id) for s in store.subjects()) == [
        ("agent", "support"), ("user", "alice"),
    ]  # fmt: skip


# -- the CLI ---------------------------------------------------------------------------------


@pytest.fixture
def cli() -> Any:
    _register()
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


@pytest.mark.parametrize(
    ("args", "fix"),
    [
        (("memory", "forget", "--user", "x" * 10_000, "--yes"), "use a shorter id"),
        (("memory", "forget", "--user", "   ", "--yes"), "only whitespace"),
        (("memory", "forget", "--user", "al\x00ice", "--yes"), "NUL"),
        (("memory", "forget", "--user", "alice", "--project-id", "p\x00", "--yes"), "--project-id"),
        (("memory", "forget", "1", "--subject", "user:al\x00ice"), "NUL"),
        (("memory", "expire", "1", "--subject", "user:" + "y" * 600), "use a shorter id"),
        (("memory", "export", "--out", "OUT", "--user", "\t"), "only whitespace"),
        (("memory", "copy", "--from", "LOC", "--to", "sqlite", "--user", "a\x00"), "NUL"),
    ],
)
def test_the_cli_refuses_a_bad_id_with_exit_2_and_the_reason(cli, store, tmp_path, args, fix):
    location = f"sqlite:///{store.path}"
    args = tuple(tmp_path / "out.jsonl" if a == "OUT" else (location if a == "LOC" else a) for a in args)
    result = cli(*map(str, args), "-l", location) if args[1] in ("forget", "expire", "export") else cli(*map(str, args))
    assert result.exit_code == 2, result.output
    assert fix in result.output, result.output
    _untouched(store)
    assert not (tmp_path / "out.jsonl").exists()


# -- the Memory page ---------------------------------------------------------------------------


def _client(store: MemoryStore, tmp_path: Path) -> TestClient:
    return TestClient(create_app(store, trace_db=tmp_path / "traces.db"), base_url=BASE)


@pytest.mark.parametrize(
    ("scope", "fix"),
    [
        ("user:%00x", "NUL"),
        # The page's own %-escaping of an id (Subject.key), of bytes that are no UTF-8
        # text: a lone surrogate's, and none at all (the framework's own decoding of the
        # query string turns raw bad bytes into U+FFFD, an id like any other).
        ("user:%25ED%25A0%2580", "decoded from its bytes"),
        ("user:%25FF%25FE", "decoded from its bytes"),
        ("user:" + "z" * 600, "use a shorter id"),
        ("user:%20%20", "only whitespace"),
        ("user:alice@%00", "NUL"),  # the project part
    ],
)
def test_the_memory_page_answers_400_with_the_reason_and_offers_no_forget(store, tmp_path, scope, fix):
    page = _client(store, tmp_path).get(f"/memory?scope={scope}")
    assert page.status_code == 400, page.text[:300]
    assert fix in page.text
    assert "\x00" not in page.text and "forget" not in page.text.lower()


def test_the_forget_form_refuses_a_bad_id_and_forgets_nothing(store, tmp_path):
    client = _client(store, tmp_path)
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', client.get("/memory?scope=user:alice").text)
    assert csrf is not None
    for user, project, fix in (("al%00ice", "", "NUL"), ("alice", "p\x00", "the project id")):
        answer = client.post(
            f"/memory/users/{user}/forget",
            data={"csrf": csrf.group(1), "confirm": user.replace("%00", "\x00"), "project_id": project},
        )
        assert answer.status_code == 400 and fix in answer.text, answer.text[:300]
    _untouched(store)


# -- MCP, the plane, the adapters ---------------------------------------------------------------


def test_mcp_refuses_a_bad_connection_user_or_token_user(store):
    from fastaiagent.mcp.auth import TokenMap
    from fastaiagent.mcp.tools import MemoryTools

    memory = Memory(store)
    for bad, fix in (("a\x00", "NUL"), ("\ud800", "decoded from its bytes"), ("x" * 513, "shorter id")):
        with pytest.raises(InvalidValueError, match=fix):
            MemoryTools(memory, user_id=bad)
        with pytest.raises(InvalidValueError, match=fix):
            TokenMap({"a-token-of-at-least-16-chars": bad})
    tools = MemoryTools(memory, user_id="alice")
    with pytest.raises(InvalidValueError, match="NUL"):  # a user a custom transport passes
        tools.retrieve("al\x00ice")
    _untouched(store)


def test_the_plane_answers_400_for_a_bad_agent_id_not_503(store):
    from fastaiagent.agent.memory_blocks.plane import PlaneFactBlock
    from fastaiagent.plane.server import create_plane_app, select_facts

    client = TestClient(create_plane_app(store, "k" * 20), base_url=BASE)
    headers = {"Authorization": "Bearer " + "k" * 20}
    good = client.get("/public/v1/memory/facts", params={"agent_id": "support"}, headers=headers)
    assert good.status_code == 200 and good.json()["facts"]
    for bad, fix in (("%00x", "NUL"), ("%20%20", "only whitespace")):
        answer = client.get(f"/public/v1/memory/facts?agent_id={bad}", headers=headers)
        assert answer.status_code == 400 and fix in answer.text, answer.text
    with pytest.raises(InvalidValueError, match="NUL"):
        select_facts(store, "sup\x00port")
    with pytest.raises(InvalidValueError, match="shorter id"):
        PlaneFactBlock(agent_id="a" * 600)
    with pytest.raises(InvalidValueError, match="project_id"):
        create_plane_app(store, "k" * 20, project_id="p\x00")


def test_the_langgraph_adapters_refuse_bad_ids_and_namespace_labels(store):
    pytest.importorskip("langgraph")
    from fastaiagent.integrations.langgraph import FastAIAgentSaver, FastAIAgentStore

    saver = FastAIAgentSaver(store)
    for bad, fix in (("t\x00", "NUL"), ("\udc80", "decoded from its bytes"), ("t" * 600, "shorter id")):
        with pytest.raises(InvalidValueError, match=fix):
            saver.get_tuple({"configurable": {"thread_id": bad}})
        with pytest.raises(InvalidValueError, match=fix):
            saver.delete_thread(bad)
    items = FastAIAgentStore(store)
    with pytest.raises(InvalidValueError, match="decoded from its bytes"):
        items.put(("users", "\ud800"), "k", {"a": 1})
    with pytest.raises(InvalidValueError, match="NUL"):
        items.put(("users", "alice"), "k\x00", {"a": 1})
    with pytest.raises(InvalidValueError, match="project_id"):
        FastAIAgentSaver(store, project_id="p\x00")


def test_the_agents_sdk_adapter_refuses_bad_ids(store):
    pytest.importorskip("agents")
    from fastaiagent.integrations.openai_agents import FastAIAgentSession, user_facts_instructions

    with pytest.raises(InvalidValueError, match="NUL"):
        FastAIAgentSession("s\x00", store)
    with pytest.raises(InvalidValueError, match="only whitespace"):
        FastAIAgentSession("  ", store)

    class Wrapper:  # what the SDK passes: the run context under .context
        def __init__(self) -> None:
            self.context = {"user_id": "al\ud800ice"}

    render = user_facts_instructions(Memory(store), "Be brief.")
    with pytest.raises(InvalidValueError, match="decoded from its bytes"):
        asyncio.run(render(Wrapper(), None))  # type: ignore[arg-type]
