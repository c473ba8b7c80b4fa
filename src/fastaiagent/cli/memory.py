"""``fastaiagent memory``: review facts from the shell: search, show a fact's history,
forget or expire a fact, forget a user, and prune what expired or was superseded long ago.

A subject is ``scope:id`` (``user:alice``); ``user:*`` means every user, as in
the API. Writes (forget, expire) name the subject, so a fact id of another
subject changes nothing. ``forget --user ID`` forgets everything of one user
(``Memory.forget(tier="user", id=ID)``), after a confirmation or ``--yes``.
"""

from __future__ import annotations

import re
import sys
import time
from datetime import datetime
from typing import Any

import typer

from fastaiagent._format import format_time
from fastaiagent._validate import identifier, moment, positive_int
from fastaiagent.cli.failures import OptionsError, checking_options
from fastaiagent.cli.options import (
    SUBJECT_HELP,
    checked_project,
    limit_option,
    location_option,
    parse_subject,
    project_option,
    subject_option,
    user_option,
)
from fastaiagent.errors import InvalidValueError
from fastaiagent.facts.fact import Fact

memory_app = typer.Typer(
    help="What memory holds: facts (search, show, forget, expire, prune), recalled messages (messages); export, import, copy.",
    no_args_is_help=True,
)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_duration(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` as seconds."""
    match = _DURATION.match(text or "")
    if not match:
        raise InvalidValueError(f"--older-than {text!r}: use a number and a unit, e.g. 30d, 12h, 90m")
    seconds = float(match[1]) * _UNITS[match[2]]
    if seconds <= 0:
        raise InvalidValueError("--older-than must be more than 0")
    return seconds


def _store(location: str) -> Any:
    from fastaiagent.facts.factory import make_fact_store

    return make_fact_store(location)


def _validity(fact: Fact) -> str:
    start = format_time(fact.valid_from or 0) or "-"
    end = format_time(fact.valid_to or 0) or "-"
    return "" if (start, end) == ("-", "-") else f"{start} .. {end}"


@memory_app.command("search")
def search(
    text: str = typer.Argument("", help="Text the facts contain (case-insensitive); empty: all."),
    location: str = location_option(),
    subject: str | None = subject_option(),
    project: str | None = project_option(None, "Only this project partition."),
    expired: bool = typer.Option(False, "--expired", help="Include facts whose validity ended."),
    limit: int = limit_option(20, "At most this many facts."),
) -> None:
    """Facts containing TEXT, newest first (expired ones only with --expired)."""
    from rich.console import Console
    from rich.table import Table

    with checking_options():
        scope, scope_id = parse_subject(subject, required=False)
        checked_project(project)
        positive_int("--limit", limit)
        store = _store(location)
    facts = store.browse(
        scope=scope, scope_id=scope_id, project_id=project, limit=limit,
        include_expired=expired, text=text or None,
    )  # fmt: skip
    if not facts:
        typer.echo("no facts")
        return
    table = Table("id", "fact", "subject", "source", "recorded", "valid", "trace", box=None)
    now = time.time()
    for fact in facts:
        mark = "  (expired)" if fact.expired(now) else ""
        table.add_row(
            str(fact.id), fact.fact + mark, fact.subject, fact.source_words,
            format_time(fact.created_at), _validity(fact), fact.source_trace_id or "",
        )  # fmt: skip
    Console(width=200).print(table)


@memory_app.command("show")
def show(
    fact_id: int = typer.Argument(..., help="Id of any version of the fact."),
    location: str = location_option(),
) -> None:
    """A fact's history: every version, newest first, with both times."""
    from fastaiagent.facts.timeline import versions

    with checking_options():
        store = _store(location)
    chain = versions(store, fact_id)
    if not chain:
        raise InvalidValueError(f"no fact #{fact_id}")
    typer.echo(f"{chain[0].subject} (project {chain[0].project_id!r}): {len(chain)} version(s)")
    for fact in chain:
        ended = f", superseded {format_time(fact.superseded_at or 0)}" if not fact.active else ""
        valid = _validity(fact)
        typer.echo(
            f"#{fact.id}  {fact.fact}\n    recorded {format_time(fact.created_at)}{ended}"
            f"{'; valid ' + valid if valid else ''}; source {_source(fact)}, "
            f"confidence {fact.confidence:.2f}"
        )


def _source(fact: Fact) -> str:
    """The source name, with the run it came from: ``learned (trace 0af3...)``."""
    words = fact.source_words
    return f"{words} (trace {fact.source_trace_id})" if fact.source_trace_id else words


@memory_app.command("forget")
def forget(
    fact_id: int | None = typer.Argument(None, help="Id of the fact to delete (with --subject)."),
    subject: str | None = subject_option(),
    user: str | None = user_option("Forget everything of this user instead: facts, windows, recall, runs."),
    yes: bool = typer.Option(False, "--yes", "-y", help="With --user: do not ask for confirmation."),
    location: str = location_option(),
    project: str = project_option("", "Project partition."),
) -> None:
    """Hard-delete one fact of SUBJECT (exit 1 when it is not that subject's), or with
    --user ID everything of that user, after a confirmation (--yes skips it)."""
    if user is not None:
        if fact_id is not None or subject is not None:
            raise OptionsError("--user forgets a whole user: give it without a fact id or --subject")
        forget_user(user, yes=yes, location=location, project=project)
        return
    if fact_id is None or subject is None:
        raise OptionsError(f"give a fact id and --subject ({SUBJECT_HELP}), or --user ID")
    with checking_options():
        scope, scope_id = parse_subject(subject, required=True)
        checked_project(project)
        store = _store(location)
    assert scope is not None
    if not store.delete(scope, scope_id or "*", project, fact_id=fact_id):
        typer.echo(f"error: {subject} has no fact #{fact_id}", err=True)
        raise typer.Exit(code=1)
    typer.echo(f"forgot #{fact_id}")


def stdin_is_terminal() -> bool:
    """Whether a person can answer a question on stdin."""
    return sys.stdin is not None and sys.stdin.isatty()


def forget_user(user_id: str, *, yes: bool, location: str, project: str) -> None:
    """``forget --user``: ``Memory(location, project_id=project).forget_user(user_id)``
    once the person confirmed (or ``yes``); prints how many of each kind went."""
    from fastaiagent.agent.forgetting import forgotten_words
    from fastaiagent.agent.memory import Memory

    where = f" in project {project!r}" if project else ""
    with checking_options():
        if user_id in ("", "*"):
            raise InvalidValueError("--user needs one user id (every user is not forgotten from the shell)")
        identifier("--user", user_id)
        checked_project(project)
        if not yes and not stdin_is_terminal():
            raise InvalidValueError(
                f"forgetting user {user_id!r} cannot be undone and there is no terminal to "
                "confirm it on: pass --yes to forget without asking"
            )
        memory = Memory(location, project_id=project)
    question = (
        f"Forget everything of user {user_id!r}{where} in {location}: every fact with its "
        "history, their stored windows and summaries, recall entries and runs?"
    )
    if not yes and not typer.confirm(question, default=False):
        typer.echo("nothing forgotten")
        raise typer.Exit(code=1)
    counts = memory.forget_user(user_id)
    typer.echo(f"forgot user {user_id!r}{where}: {forgotten_words(counts)} deleted")


@memory_app.command("expire")
def expire(
    fact_id: int = typer.Argument(..., help="Id of the active fact to end."),
    subject: str = subject_option(...),
    at: str | None = typer.Option(None, "--at", help="When it ends (ISO 8601, UTC if no zone); default now."),
    location: str = location_option(),
    project: str = project_option("", "Project partition."),
) -> None:
    """End one active fact of SUBJECT now (or --at): it stays, as history."""
    with checking_options():
        scope, scope_id = parse_subject(subject, required=True)
        checked_project(project)
        when = time.time() if at is None else moment("--at", _iso(at))
        store = _store(location)
    assert scope is not None and when is not None
    if not store.expire(scope, scope_id or "*", project, fact_id, when):
        typer.echo(f"error: {subject} has no active fact #{fact_id}", err=True)
        raise typer.Exit(code=1)
    typer.echo(f"#{fact_id} expires {format_time(when)}")


def _iso(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidValueError(f"--at {text!r} is not an ISO 8601 time (e.g. 2026-12-05T00:00)") from exc


@memory_app.command("prune")
def prune(
    older_than: str = typer.Option(..., "--older-than", help="e.g. 30d: expired or superseded this long ago."),
    location: str = location_option(),
    project: str | None = project_option(None, "Only this project (default: all)."),
    batch: int = typer.Option(500, help="Facts one step deletes at most."),
    max_facts: int | None = limit_option(None, "Stop after this many (default: all)."),
) -> None:
    """Delete facts that expired or were superseded more than --older-than ago, in steps
    (at most --limit of them)."""
    with checking_options():
        cutoff = time.time() - parse_duration(older_than)
        checked_project(project)
        positive_int("--batch", batch)
        positive_int("--limit", max_facts, allow_none=True)
        store = _store(location)
    total = 0
    while max_facts is None or total < max_facts:
        step = batch if max_facts is None else min(batch, max_facts - total)
        deleted = store.prune_history(cutoff, project_id=project, limit=step)
        total += deleted
        if deleted < step:
            break
    typer.echo(f"pruned {total} fact(s) expired or superseded before {format_time(cutoff)}")


def register(app: typer.Typer) -> None:
    """Add the ``memory`` sub-app to the ``fastaiagent`` CLI."""
    from fastaiagent.cli import memory_transfer, messages

    memory_transfer.register(memory_app)
    messages.register(memory_app)
    app.add_typer(memory_app, name="memory")
