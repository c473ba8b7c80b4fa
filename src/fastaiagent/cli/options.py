"""The options ``fastaiagent`` commands share: one spelling per idea, named once.

=============  ==========================  ====================================
idea           option                      in Python
=============  ==========================  ====================================
user           ``--user ID``               ``user_id=``, ``tier="user", id=``
subject        ``--subject scope:id``      ``Fact.subject`` (``user:alice``)
location       ``--location`` / ``-l``     ``Memory(location=)``
project        ``--project-id``            ``project_id=``
agent          ``--agent-id``              ``Memory(agent_id=)``
how many       ``--limit``                 ``limit=``
trace store    ``--trace-db``              ``TraceStore(path)``
=============  ==========================  ====================================

An option renamed keeps its old spelling until :data:`REMOVED_IN`: every
command that has the new spelling accepts the old one (hidden from ``--help``),
runs as if given the new one and prints a note on stderr
(:data:`RENAMED_OPTIONS`; :func:`use_renamed_spellings` applies it to every
command). An old option that is not a plain rename (``learn --scope-id``) is a
hidden :func:`deprecated_option` the command merges itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from fastaiagent._validate import identifier
from fastaiagent.agent.deprecation import REMOVED_IN, deprecation_note
from fastaiagent.errors import InvalidValueError
from fastaiagent.facts.fact import SCOPES

USER_FLAG = "--user"
SUBJECT_FLAG = "--subject"
LOCATION_FLAG = "--location"
PROJECT_FLAG = "--project-id"
AGENT_FLAG = "--agent-id"
LIMIT_FLAG = "--limit"
TRACE_DB_FLAG = "--trace-db"

LOCATION_HELP = "Fact store: sqlite, sqlite:///path, postgres://..., redis://..."
SUBJECT_HELP = "scope:id, e.g. user:alice; user:* is every user"
# Kept for the modules that spread it (``*PROJECT_FLAGS``): the one spelling now.
PROJECT_FLAGS = (PROJECT_FLAG,)

# Old spelling -> the one that replaced it; accepted by every command that has the new one.
RENAMED_OPTIONS = {
    "--project": PROJECT_FLAG,  # memory, learn (Python's project_id=)
    "--user-id": USER_FLAG,  # mcp
    "--scope": SUBJECT_FLAG,  # learn, learn list (scope or scope:id, as --subject)
    "--agent": AGENT_FLAG,  # learn (only runs of this agent)
    "--max": LIMIT_FLAG,  # memory prune
}


def location_option(default: str = "sqlite", help: str = LOCATION_HELP) -> Any:
    """``--location`` / ``-l``: where the facts are (``Memory(location=)``)."""
    return typer.Option(default, LOCATION_FLAG, "-l", help=help)


def user_option(help: str, default: str | None = None) -> Any:
    """``--user ID``: one user's memory."""
    return typer.Option(default, USER_FLAG, help=help)


def subject_option(default: Any = None, help: str = SUBJECT_HELP) -> Any:
    """``--subject`` / ``-s``: a scope and its id, ``user:alice`` (``...``: required)."""
    return typer.Option(default, SUBJECT_FLAG, "-s", help=help)


def project_option(default: str | None, help: str) -> Any:
    """``--project-id``: the tenant partition (``project_id=``)."""
    return typer.Option(default, PROJECT_FLAG, help=help)


def agent_option(help: str) -> Any:
    """``--agent-id``: an agent's id (``Memory(agent_id=)``; the agent-scope subject)."""
    return typer.Option(None, AGENT_FLAG, help=help)


def limit_option(default: int | None, help: str) -> Any:
    """``--limit``: at most this many."""
    return typer.Option(default, LIMIT_FLAG, help=help)


def trace_db_option(help: str) -> Any:
    """``--trace-db``: the local trace store."""
    return typer.Option(None, TRACE_DB_FLAG, help=help)


def deprecated_option(old: str, new: str) -> Any:
    """A hidden option ``old`` that still works and prints a note naming ``new``
    when given (the command merges its value into ``new``'s)."""

    def note(value: Any) -> Any:
        if value is not None:
            say_renamed(old, new)
        return value

    return typer.Option(None, old, hidden=True, callback=note)


def say_renamed(old: str, new: str) -> None:
    """The note an old spelling prints on stderr (stdout stays the command's output)."""
    typer.echo(f"note: {deprecation_note(old, new)}", err=True)


def parse_subject(value: str | None, *, required: bool) -> tuple[str | None, str | None]:
    """``--subject``'s ``scope:id`` as (scope, id); id None for ``scope`` alone or
    ``scope:*`` (every subject of the scope, where a command reads)."""
    if not value:
        if required:
            raise InvalidValueError(f"--subject is required ({SUBJECT_HELP})")
        return None, None
    scope, colon, scope_id = value.partition(":")
    if scope not in SCOPES or (required and not scope_id):
        raise InvalidValueError(f"--subject {value!r}: expected {SUBJECT_HELP}, scope one of {SCOPES}")
    if not colon or scope_id == "*":
        return scope, None
    return scope, identifier("--subject's id", scope_id)


def checked_project(project: str | None) -> str | None:
    """``--project-id`` checked by the one id rule ("" is the default partition;
    None: every project, where a command allows it)."""
    return None if project is None else identifier(PROJECT_FLAG, project, allow_empty=True)


def _spellings(params: Sequence[Any]) -> tuple[set[str], set[str]]:
    """Every option string of ``params``, and those that take a value."""
    every: set[str] = set()
    valued: set[str] = set()
    for param in params:
        names = [*param.opts, *getattr(param, "secondary_opts", ())]
        every.update(names)
        if param.param_type_name == "option" and not param.is_flag and not param.count:
            valued.update(param.opts)
    return every, valued


def renamed_args(params: Sequence[Any], args: list[str], *, stop_at_word: bool) -> list[str]:
    """``args`` with each old spelling of :data:`RENAMED_OPTIONS` (``--old`` or
    ``--old=value``) replaced by its new one, where ``params`` have the new one and
    not the old; a note for each on stderr. Values and everything after ``--`` (and,
    for a group, after its sub-command's name) are left as they are."""
    every, valued = _spellings(params)
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" or (stop_at_word and not arg.startswith("-")):
            return out + args[i:]
        name, equals, value = arg.partition("=")
        new = RENAMED_OPTIONS.get(name)
        if new is not None and new in every and name not in every:
            say_renamed(name, new)
            name, arg = new, new + equals + value
        out.append(arg)
        if name in valued and not equals and i + 1 < len(args):
            out.append(args[i + 1])
            i += 1
        i += 1
    return out


class RenamingCommand(TyperCommand):
    """A command that takes the old spellings of its options (see :func:`renamed_args`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, renamed_args(self.get_params(ctx), args, stop_at_word=False))


class RenamingGroup(TyperGroup):
    """A group (its own options, before the sub-command) that takes old spellings."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, renamed_args(self.get_params(ctx), args, stop_at_word=True))


def use_renamed_spellings(app: typer.Typer) -> None:
    """Make every command and sub-group of ``app`` accept the old spellings."""
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):  # typer's default; a command's own class is kept
            info.cls = RenamingCommand
    for group in app.registered_groups:
        group.cls = RenamingGroup
        if group.typer_instance is not None:
            use_renamed_spellings(group.typer_instance)


__all__ = [
    "REMOVED_IN",
    "RENAMED_OPTIONS",
    "agent_option",
    "checked_project",
    "deprecated_option",
    "limit_option",
    "location_option",
    "parse_subject",
    "project_option",
    "subject_option",
    "trace_db_option",
    "use_renamed_spellings",
    "user_option",
]
