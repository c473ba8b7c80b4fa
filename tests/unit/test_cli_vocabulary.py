"""One spelling per idea on the command line: every command's options, walked from
the command tree, name a user, a subject, a location, a project, an agent and a
limit one way; the old spellings still work, hidden from ``--help``, with a note."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from fastaiagent.agent.deprecation import REMOVED_IN
from fastaiagent.cli import _register, app
from fastaiagent.cli.old_spellings import renamed_args
from fastaiagent.cli.options import RENAMED_OPTIONS
from fastaiagent.learn import Fact, MemoryStore

# Every spelling each idea has had (the oracle: what a user might have typed).
IDEAS = {
    "user": {"--user", "--user-id"},
    "subject": {"--subject", "--scope", "--scope-id"},
    "location": {"--location"},
    "project": {"--project-id", "--project"},
    "agent": {"--agent-id", "--agent"},
    "limit": {"--limit", "--max"},
    "trace store": {"--trace-db"},
}
CHOSEN = {
    "user": "--user",
    "subject": "--subject",
    "location": "--location",
    "project": "--project-id",
    "agent": "--agent-id",
    "limit": "--limit",
    "trace store": "--trace-db",
}
# The spellings that are not plain renames: hidden options the command merges itself.
HIDDEN = {("learn",): {"--scope-id"}}


def _commands() -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path, click command) for every command and group of ``fastaiagent``."""
    _register()
    root = typer.main.get_command(app)

    def walk(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
        yield path, command
        if hasattr(command, "list_commands"):
            ctx = command.make_context("fastaiagent", ["--help"], resilient_parsing=True)
            for name in command.list_commands(ctx):
                yield from walk(command.get_command(ctx, name), (*path, name))

    yield from walk(root, ())


def _options(command: Any, *, hidden: bool) -> set[str]:
    return {
        name
        for param in command.params
        if param.param_type_name == "option" and bool(getattr(param, "hidden", False)) == hidden
        for name in (*param.opts, *param.secondary_opts)
    }


@pytest.fixture
def cli():  # type: ignore[no-untyped-def]
    _register()
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


def test_every_idea_has_one_spelling_across_every_command() -> None:
    seen: dict[str, dict[str, list[str]]] = {idea: {} for idea in IDEAS}
    commands = list(_commands())
    assert len(commands) > 10  # the walk reached the sub-commands
    for path, command in commands:
        for option in _options(command, hidden=False):
            for idea, spellings in IDEAS.items():
                if option in spellings:
                    seen[idea].setdefault(option, []).append(" ".join(path))
    for idea, used in seen.items():
        assert set(used) <= {CHOSEN[idea]}, f"{idea} is spelled {sorted(used)}: {used}"
    assert seen["user"]["--user"] and seen["subject"]["--subject"] and seen["project"]["--project-id"]


def test_old_spellings_are_hidden_and_nothing_visible_is_an_old_spelling(cli) -> None:  # type: ignore[no-untyped-def]
    for path, command in _commands():
        visible = _options(command, hidden=False)
        assert not visible & set(RENAMED_OPTIONS), (path, visible & set(RENAMED_OPTIONS))
        assert _options(command, hidden=True) == HIDDEN.get(path, set()), path
        words = set(re.findall(r"--[a-z][a-z-]*", cli(*path, "--help").output))
        old = set(RENAMED_OPTIONS) | HIDDEN.get(path, set())
        assert not words & old, (path, words & old)


def test_every_rename_points_at_a_spelling_some_command_has() -> None:
    visible = set().union(*(_options(command, hidden=False) for _, command in _commands()))
    assert set(RENAMED_OPTIONS.values()) <= visible
    assert set(RENAMED_OPTIONS.values()) <= set(CHOSEN.values())


@pytest.fixture
def location(tmp_path) -> str:  # type: ignore[no-untyped-def]
    store = MemoryStore(tmp_path / "facts.db")
    store.add(Fact("Alice takes tea", scope="user", scope_id="alice", project_id="acme"))
    store.add(Fact("Bob takes coffee", scope="user", scope_id="bob", project_id="acme"))
    store.add(Fact("Alice in the default project", scope="user", scope_id="alice"))
    return f"sqlite:///{store.path}"


def _note(old: str, new: str) -> str:
    return f"note: {old} is deprecated: use {new} (removed in fastaiagent {REMOVED_IN})"


def test_old_spellings_still_work_and_say_what_replaces_them(cli, location: str) -> None:  # type: ignore[no-untyped-def]
    new = cli("learn", "list", "-l", location, "--subject", "user:alice", "--project-id", "acme")
    old = cli("learn", "list", "-l", location, "--scope", "user:alice", "--project=acme")
    assert new.exit_code == old.exit_code == 0, old.output
    assert "Alice takes tea" in old.stdout and "Bob" not in old.stdout and "default project" not in old.stdout
    assert old.stdout == new.stdout and new.stderr == ""
    assert old.stderr.splitlines() == [_note("--scope", "--subject"), _note("--project", "--project-id")]


def test_old_limit_of_prune_and_old_scope_pair_of_learn(cli, location: str) -> None:  # type: ignore[no-untyped-def]
    pruned = cli("memory", "prune", "--older-than", "1d", "-l", location, "--max", "0")
    assert pruned.exit_code == 2 and "--limit" in pruned.stderr  # checked as --limit now
    assert _note("--max", "--limit") in pruned.stderr
    # --scope user --scope-id alice is --subject user:alice: the personal-data rule applies.
    mined = cli("learn", "-l", location, "--scope", "user", "--scope-id", "alice", "--model", "m")
    assert mined.exit_code == 2 and "--allow-personal" in mined.stderr
    assert _note("--scope", "--subject") in mined.stderr
    assert _note("--scope-id", "--subject scope:id") in mined.stderr
    twice = cli("learn", "-l", location, "--subject", "agent:x", "--scope-id", "y", "--model", "m")
    assert twice.exit_code == 2 and "give the id once" in twice.stderr


def test_mcp_takes_user_id_as_the_old_spelling_of_user(cli, location: str) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("mcp.server.mcpserver")
    refused = cli("mcp", "-l", location, "--user-id", "*", "--no-semantic")
    assert refused.exit_code == 2 and '--user cannot be "*"' in refused.stderr
    assert _note("--user-id", "--user") in refused.stderr


def test_a_value_or_an_argument_that_looks_like_an_old_spelling_is_left_alone(cli, location: str) -> None:  # type: ignore[no-untyped-def]
    searched = cli("memory", "search", "-l", location, "--", "--project")
    assert searched.exit_code == 0 and searched.stdout.strip() == "no facts" and searched.stderr == ""
    command = dict(_commands())[("memory", "search")]
    args = ["--subject", "--max", "--max", "3", "text"]
    assert renamed_args(command.params, args, stop_at_word=False) == ["--subject", "--max", "--limit", "3", "text"]


def test_mcp_help_lists_every_tool_served_and_marks_the_deprecated_one(cli) -> None:  # type: ignore[no-untyped-def]
    from fastaiagent.mcp.tools import DEPRECATED_TOOLS, TOOLS

    text = " ".join(cli("mcp", "--help").output.split())
    for tool in TOOLS:
        assert re.search(rf"\b{tool}\b", text), tool
    for old, new in DEPRECATED_TOOLS.items():
        assert f"{old} (deprecated: use {new}; removed in fastaiagent {REMOVED_IN})" in text
    assert set(TOOLS) | set(DEPRECATED_TOOLS) == {"remember", "retrieve", "update", "forget", "recall"}


def test_the_server_serves_exactly_the_tools_the_help_lists(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("mcp.server.mcpserver")
    import anyio

    from fastaiagent import Memory
    from fastaiagent.mcp.server import create_server
    from fastaiagent.mcp.tools import DEPRECATED_TOOLS, TOOLS, MemoryTools

    memory = Memory(f"sqlite:///{tmp_path / 'facts.db'}")
    try:
        server = create_server(MemoryTools(memory, user_id="alice"))
        listed = anyio.run(server.list_tools)
    finally:
        memory.location.close()
    assert [tool.name for tool in listed] == [*TOOLS, *DEPRECATED_TOOLS]
