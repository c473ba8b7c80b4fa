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

Two locations at once (``memory copy``) are ``--from`` and ``--to``. A secret
a client must send is ``--token`` (``ui``; ``mcp``, where it also names the
user); the plane's is ``--api-key``, as in ``PlaneConnection(api_key=)``.

An option renamed keeps its old spelling until :data:`REMOVED_IN`
(:data:`RENAMED_OPTIONS`): every command that has the new spelling accepts the
old one, hidden from ``--help``, with a note on stderr (see
:mod:`fastaiagent.cli.old_spellings`).
"""

from __future__ import annotations

from typing import Any

import typer

from fastaiagent._validate import identifier
from fastaiagent.agent.deprecation import REMOVED_IN
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


def user_option(help: str, default: Any = None) -> Any:
    """``--user ID``: one user's memory (``...``: required)."""
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


__all__ = [
    "REMOVED_IN",
    "RENAMED_OPTIONS",
    "agent_option",
    "checked_project",
    "limit_option",
    "location_option",
    "parse_subject",
    "project_option",
    "subject_option",
    "trace_db_option",
    "user_option",
]
