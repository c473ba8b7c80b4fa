"""``fastaiagent mcp`` driven by the official ``mcp`` client, over stdio and streamable HTTP.

Over stdio the server is spawned as a host spawns it (``python -m fastaiagent.cli
mcp ...``); over HTTP it runs in a thread (the same app the CLI serves) or as
the CLI process. Postgres and Redis runs are in tests/backends/test_mcp_backends.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from _env import require_module

require_module("mcp")

import httpx  # noqa: E402
from mcp import MCPError  # noqa: E402

from _mcp_client import (  # noqa: E402
    DEPRECATED_TOOLS,
    LISTED,
    TOKEN_ALICE,
    TOKEN_BOB,
    bad_arguments_are_tool_errors,
    call,
    call_error,
    cli_args,
    http_session,
    retrieved,
    round_trip,
    serving_http,
    stdio_session,
)
from fastaiagent import Memory  # noqa: E402
from fastaiagent.agent.deprecation import REMOVED_IN  # noqa: E402


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (possibly nested) exception groups."""
    inner = getattr(exc, "exceptions", None)
    return [leaf for sub in inner for leaf in leaves(sub)] if inner else [exc]


def sqlite_location(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'facts.db'}"


@pytest.fixture
def memory(tmp_path: Path) -> Memory:
    m = Memory(sqlite_location(tmp_path), agent_id="support")
    yield m
    m.location.close()


# -- stdio: a desktop host spawning the command ----------------------------------------------------


def test_stdio_lists_the_tools_with_their_input_schemas(tmp_path):
    async def scenario() -> None:
        args = cli_args("--location", sqlite_location(tmp_path), "--user", "alice")
        async with stdio_session(args, str(tmp_path)) as session:
            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(listed) == LISTED
            remember = listed["remember"].input_schema
            assert remember["required"] == ["text"]
            assert remember["properties"]["tier"]["enum"] == ["user", "global"]
            assert remember["properties"]["confidence"]["maximum"] == 1.0
            assert set(listed["update"].input_schema["required"]) == {"new", "old"}
            assert listed["retrieve"].input_schema["properties"]["limit"]["minimum"] == 1
            # No tool takes a user: who a connection acts for is the server's to say.
            for tool in listed.values():
                assert not {"user", "user_id", "id"} & set(tool.input_schema["properties"])
                assert tool.output_schema is not None and tool.description
            assert listed["retrieve"].annotations.read_only_hint is True
            assert listed["forget"].annotations.destructive_hint is True

    anyio.run(scenario)


def test_the_deprecated_recall_tool_still_retrieves_and_says_it_is_deprecated(tmp_path, caplog):
    memory = Memory(sqlite_location(tmp_path))

    async def scenario(url: str) -> None:
        async with http_session(url) as session:
            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            for old, new in DEPRECATED_TOOLS.items():
                assert listed[old].description.startswith("Deprecated")
                assert listed[old].meta == {"deprecated": True, "replaced_by": new}
                assert listed[old].input_schema == listed[new].input_schema
                assert listed[old].output_schema == listed[new].output_schema
            await call(session, "remember", text="Alice lives in Lyon")
            old = await call(session, "recall", limit=5)
            assert old == await call(session, "retrieve", limit=5)
            assert [f["text"] for f in old["facts"]] == ["Alice lives in Lyon"]
            assert "limit" in await call_error(session, "recall", limit=0)
            await call(session, "recall")

    with (
        caplog.at_level("WARNING", logger="fastaiagent.mcp"),
        serving_http(memory, user_id="alice") as url,
    ):
        anyio.run(scenario, url)
    memory.location.close()
    said = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert said == [
        f"MCP tool 'recall' is deprecated: clients should call 'retrieve' (removed in fastaiagent {REMOVED_IN})"
    ]  # once


def test_the_tools_deprecated_recall_method_warns_and_retrieves(memory):
    from fastaiagent.mcp import MemoryTools

    tools = MemoryTools(memory, user_id="alice")
    tools.remember("alice", "Alice lives in Lyon")
    with pytest.warns(DeprecationWarning, match="MemoryTools.retrieve"):
        old = tools.recall("alice")
    assert old == tools.retrieve("alice")


def test_stdio_round_trip_and_the_facts_are_durable(tmp_path):
    location = sqlite_location(tmp_path)
    args = cli_args("--location", location, "--user", "alice")

    async def scenario() -> None:
        async with stdio_session(args, str(tmp_path)) as session:
            await round_trip(session)
            await call(session, "remember", text="Alice's cat is called Miso")

    anyio.run(scenario)
    # Another process, the library's own Memory: the fact is there, filed under alice.
    memory = Memory(location)
    try:
        assert [f.fact for f in memory.retrieve(tier="user", id="alice")] == [
            "Alice's cat is called Miso"
        ]
        assert memory.retrieve(tier="user", id="bob") == []
    finally:
        memory.location.close()


def test_stdio_bad_arguments_are_tool_errors_and_the_server_keeps_running(tmp_path):
    async def scenario() -> None:
        args = cli_args(
            "--location", sqlite_location(tmp_path), "--user", "alice", "--agent-id", "support"
        )
        async with stdio_session(args, str(tmp_path)) as session:
            await bad_arguments_are_tool_errors(session)

    anyio.run(scenario)


def test_stdio_without_a_user_has_no_user_tier(tmp_path):
    async def scenario() -> None:
        args = cli_args(
            "--location", sqlite_location(tmp_path), "--agent-id", "support", "--global-writes"
        )
        async with stdio_session(args, str(tmp_path)) as session:
            assert "--user" in await call_error(session, "remember", text="I like tea")
            assert "--user" in await call_error(session, "retrieve")
            await call(session, "remember", text="Support hours are 9 to 5", tier="global")
            assert await retrieved(session, tier="global") == ["Support hours are 9 to 5"]

    anyio.run(scenario)


# -- HTTP: tokens decide the user ------------------------------------------------------------------


def test_http_round_trip_with_a_token(memory):
    async def scenario(url: str) -> None:
        async with http_session(url, TOKEN_ALICE) as session:
            assert {tool.name for tool in (await session.list_tools()).tools} == LISTED
            await round_trip(session)

    with serving_http(memory, tokens={TOKEN_ALICE: "alice"}) as url:
        anyio.run(scenario, url)


def test_http_a_second_users_token_sees_nothing_of_the_first(memory):
    tokens = {TOKEN_ALICE: "alice", TOKEN_BOB: "bob"}

    async def scenario(url: str) -> None:
        async with http_session(url, TOKEN_ALICE) as alice:
            fact_id = (await call(alice, "remember", text="Alice's PIN hint is her cat"))["id"]
        async with http_session(url, TOKEN_BOB) as bob:
            assert await retrieved(bob) == []
            # A tool argument cannot switch the user: an argument the tool does not take
            # is refused, naming it, and nothing is read.
            refused = await call_error(bob, "retrieve", user="alice", user_id="alice", id="alice")
            assert "does not take arguments id, user, user_id" in refused and "Alice" not in refused
            # Alice's fact id is not Bob's to replace; the error does not say whose it is.
            message = await call_error(bob, "update", new="hacked", old=fact_id)
            assert "alice" not in message and "no active user fact" in message
            assert "no active user" in await call_error(
                bob, "update", new="hacked", old="Alice's PIN hint is her cat"
            )
            assert (await call(bob, "forget", fact="Alice's PIN hint is her cat"))["deleted"] == 0
            assert (await call(bob, "forget", everything=True))["deleted"] == 0
            await call(bob, "remember", text="Bob likes jazz")
        async with http_session(url, TOKEN_ALICE) as alice:
            assert await retrieved(alice) == ["Alice's PIN hint is her cat"]

    with serving_http(memory, tokens=tokens) as url:
        anyio.run(scenario, url)
    assert [f.fact for f in memory.retrieve(tier="user", id="bob")] == ["Bob likes jazz"]


def test_http_requests_without_a_valid_token_are_refused(memory):
    with serving_http(memory, tokens={TOKEN_ALICE: "alice"}) as url:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        for headers in (
            {},
            {"Authorization": "Bearer wrong-token-0123456789"},
            {"Authorization": f"Basic {TOKEN_ALICE}"},
        ):
            answer = httpx.post(url, json=body, headers=headers)
            assert answer.status_code == 401
            assert answer.headers["www-authenticate"].startswith("Bearer")

        async def scenario() -> list[BaseException]:
            try:
                async with http_session(url, "wrong-token-0123456789") as session:
                    await session.list_tools()
            except Exception as exc:  # the client's task group wraps the error
                return leaves(exc)
            return []

        failures = anyio.run(scenario)
        assert failures and all(isinstance(exc, MCPError) for exc in failures), failures


def test_http_bad_arguments_are_tool_errors(memory):
    async def scenario(url: str) -> None:
        async with http_session(url, TOKEN_ALICE) as session:
            await bad_arguments_are_tool_errors(session)

    with serving_http(memory, tokens={TOKEN_ALICE: "alice"}) as url:
        anyio.run(scenario, url)


def test_http_global_facts_are_shared_and_written_only_when_allowed(memory):
    tokens = {TOKEN_ALICE: "alice", TOKEN_BOB: "bob"}

    async def scenario(url: str, writes: bool) -> None:
        async with http_session(url, TOKEN_ALICE) as alice:
            if not writes:
                assert "--global-writes" in await call_error(
                    alice, "remember", text="x", tier="global"
                )
                assert "--global-writes" in await call_error(
                    alice, "forget", tier="global", everything=True
                )
                return
            await call(alice, "remember", text="Refunds take 5 days", tier="global")
        async with http_session(url, TOKEN_BOB) as bob:
            assert await retrieved(bob, tier="global") == ["Refunds take 5 days"]

    with serving_http(memory, tokens=tokens) as url:
        anyio.run(scenario, url, False)
    with serving_http(memory, tokens=tokens, allow_global_writes=True) as url:
        anyio.run(scenario, url, True)
    assert [f.fact for f in memory.retrieve(tier="global")] == ["Refunds take 5 days"]


def test_retrieve_by_meaning_is_refused_when_semantic_is_off(tmp_path):
    memory = Memory(sqlite_location(tmp_path))

    async def scenario(url: str) -> None:
        async with http_session(url) as session:
            await call(session, "remember", text="Alice lives in Lyon")
            assert "--no-semantic" in await call_error(
                session, "retrieve", query="where does she live"
            )
            assert await retrieved(session, query="  ") == ["Alice lives in Lyon"]

    with serving_http(memory, user_id="alice") as url:
        anyio.run(scenario, url)
    memory.location.close()


@pytest.mark.embedder
def test_retrieve_by_meaning_with_the_offline_embedder(tmp_path):
    memory = Memory(sqlite_location(tmp_path), semantic="auto", embedder="local")
    facts = ["Alice is allergic to peanuts", "Alice lives in Lyon", "Alice works as a nurse"]

    async def scenario(url: str) -> None:
        async with http_session(url, TOKEN_ALICE) as session:
            for text in facts:
                await call(session, "remember", text=text)
            found = await retrieved(session, query="Which foods must she avoid?", limit=2)
            assert found[0] == "Alice is allergic to peanuts" and len(found) == 2
            assert sorted(await retrieved(session)) == sorted(facts)

    with serving_http(memory, tokens={TOKEN_ALICE: "alice"}) as url:
        anyio.run(scenario, url)
    memory.location.close()


# -- the command: binding rules and a real HTTP process ------------------------------------------


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *cli_args(*args)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def test_a_token_is_required_off_localhost(tmp_path):
    done = run_cli(
        "--transport",
        "http",
        "--host",
        "0.0.0.0",
        "--port",
        "0",
        "--location",
        sqlite_location(tmp_path),
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: refusing to serve MCP on '0.0.0.0' without a token"
    )
    assert "--token" in lines[0] and done.stdout == ""


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (("--transport", "http", "--token", "short=alice"), {}, "at least 16 characters"),
        (("--transport", "http", "--token", "no-user-in-this-token-spec"), {}, "TOKEN=USER"),
        (
            ("--transport", "http", "--token", f"{TOKEN_ALICE}=alice", "--user", "bob"),
            {},
            "not both",
        ),
        (
            (
                "--transport",
                "stdio",
            ),
            {"FASTAIAGENT_MCP_TOKENS": f"{TOKEN_ALICE}=alice"},
            "tokens are for --transport http",
        ),
        (
            (
                "--transport",
                "carrier-pigeon",
            ),
            {},
            "--transport",
        ),
        (
            (
                "--user",
                "*",
            ),
            {},
            "wildcard",
        ),
        (("--transport", "http", "--tokens-file", "/nonexistent/tokens"), {}, "no tokens file"),
    ],
)
def test_bad_options_fail_with_one_line(tmp_path, args, env, expected):
    done = run_cli(*args, "--location", sqlite_location(tmp_path), env=env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and expected in lines[0]


def test_the_http_command_serves_token_users_off_localhost(tmp_path):
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text(f"# who may connect\n{TOKEN_ALICE}=alice\n{TOKEN_BOB}=bob\n")
    process = subprocess.Popen(
        [
            sys.executable,
            *cli_args(
                "--transport",
                "http",
                "--host",
                "0.0.0.0",
                "--port",
                "0",
                "--tokens-file",
                str(tokens_file),
                "--location",
                sqlite_location(tmp_path),
            ),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        banner = process.stdout.readline()  # printed once the port is bound
        assert "2 token(s)" in banner, banner
        port = banner.split("/mcp")[0].rsplit(":", 1)[1]
        url = f"http://127.0.0.1:{port}/mcp"

        async def scenario() -> None:
            async with http_session(url, TOKEN_ALICE) as alice:
                await call(alice, "remember", text="Alice flies on Fridays")
            async with http_session(url, TOKEN_BOB) as bob:
                assert await retrieved(bob) == []

        anyio.run(scenario)
        assert httpx.post(url, json={}).status_code == 401
    finally:
        process.terminate()
        process.wait(timeout=20)
        process.stdout.close()


# -- the example and the desktop host snippet ------------------------------------------------------

EXAMPLE_DIR = Path(__file__).resolve().parents[2] / "examples" / "integrations" / "mcp"


def test_the_example_client_runs(tmp_path):
    done = subprocess.run(
        [sys.executable, str(EXAMPLE_DIR / "client.py"), sqlite_location(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "after update: ['Alice prefers aisle seats']" in done.stdout
    assert "a bad argument is a tool error: True" in done.stdout


def test_the_desktop_host_snippet_starts_a_server(tmp_path):
    import json

    entry = json.loads((EXAMPLE_DIR / "host_config.json").read_text())["mcpServers"][
        "fastaiagent-memory"
    ]
    assert entry["command"] == "fastaiagent" and entry["args"][0] == "mcp"
    args = list(entry["args"])
    args[args.index("--location") + 1] = sqlite_location(
        tmp_path
    )  # the snippet's path is a placeholder

    async def scenario() -> None:
        # The same arguments after the command, as the host passes them.
        async with stdio_session(["-m", "fastaiagent.cli", *args], str(tmp_path)) as session:
            assert {tool.name for tool in (await session.list_tools()).tools} == LISTED
            await call(session, "remember", text="Alice uses the desktop app")
            assert await retrieved(session) == ["Alice uses the desktop app"]

    anyio.run(scenario)
