"""``fastaiagent mcp`` reads its store once at start: a store that cannot be used exits 1
with one line naming it, instead of serving a server whose every call fails. And a tool
argument the tool does not take is refused over the real transport, storing nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from _env import free_port, require_module

require_module("mcp")

from _mcp_client import call, call_error, cli_args, stdio_session  # noqa: E402
from fastaiagent import Memory  # noqa: E402

pytestmark = pytest.mark.subprocess


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *cli_args(*args)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        stdin=subprocess.DEVNULL,
    )


def fails_naming(done: subprocess.CompletedProcess[str], *names: str) -> str:
    """The one error line of a start that failed with exit 1, naming ``names``."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert all(name in lines[0] for name in names), lines[0]
    return lines[0]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_damaged_sqlite_file_exits_1_naming_it(tmp_path, transport):
    damaged = tmp_path / "facts.db"
    damaged.write_bytes(os.urandom(8192))
    done = run_cli(
        "--location", f"sqlite:///{damaged}", "--user", "alice",
        "--transport", transport, "--port", "0",
    )  # fmt: skip
    fails_naming(done, str(damaged), "damaged")
    assert "MCP server on" not in done.stderr


@pytest.mark.redis
def test_a_redis_db_index_out_of_range_exits_1_naming_the_url(redis_url):
    url = redis_url.rsplit("/", 1)[0] + "/99"
    fails_naming(run_cli("--location", url, "--user", "alice"), url, "DB index")


@pytest.mark.redis
def test_an_unreachable_redis_exits_1_naming_it():
    url = f"redis://127.0.0.1:{free_port()}/0"
    fails_naming(run_cli("--location", url, "--user", "alice"), url, "cannot reach Redis")


@pytest.mark.postgres
def test_an_unreachable_postgres_exits_1_naming_it():
    url = f"postgresql://postgres:secret@127.0.0.1:{free_port()}/test?connect_timeout=2"
    line = fails_naming(run_cli("--location", url, "--user", "alice"), "127.0.0.1", "Postgres")
    assert "secret" not in line


def test_over_stdio_an_argument_the_tool_does_not_take_stores_nothing(tmp_path: Path):
    location = f"sqlite:///{tmp_path / 'facts.db'}"

    async def scenario() -> None:
        args = cli_args("--location", location, "--user", "alice")
        async with stdio_session(args, str(tmp_path)) as session:
            said = await call_error(session, "remember", text="Bob likes tea", user_id="bob")
            assert "remember does not take argument user_id" in said
            assert "text, tier, confidence" in said
            assert (await call(session, "retrieve"))["facts"] == []

    anyio.run(scenario)
    memory = Memory(location)
    try:
        assert memory.retrieve(tier="user", id="alice") == []
        assert memory.retrieve(tier="user", id="bob") == []
    finally:
        memory.location.close()
