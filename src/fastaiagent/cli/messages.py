"""``fastaiagent memory messages``: a user's recalled messages, from the shell.

What ``Memory(recall="auto")`` and ``Memory.add_history`` keep of a user's
conversations: listed newest first a page at a time, searched by keywords (the
keyword side of recall), and one deleted by id (``--delete``): its vector and
keyword postings go, so recall no longer finds it, and its mentions leave the
user's entity book; ``--entities`` lists the things the user talks about
(:mod:`fastaiagent.recall.entity_store`). Reads and deletes name the
user; a message id of another user changes nothing (see
:mod:`fastaiagent.facts.messages`).
"""

from __future__ import annotations

from typing import Any

import typer

from fastaiagent._format import format_time
from fastaiagent._validate import identifier, positive_int
from fastaiagent.cli.failures import checking_options
from fastaiagent.cli.options import (
    checked_project,
    limit_option,
    location_option,
    project_option,
    user_option,
)
from fastaiagent.errors import InvalidValueError

SHOWN_CHARS = 160  # a long message is cut in the table; the id leads to all of it


def _who(message: Any) -> str:
    return f"{message.role} ({message.speaker})" if message.speaker else message.role


def _print(messages: list[Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table("id", "said", "by", "message", box=None)
    for message in messages:
        text = message.text if len(message.text) <= SHOWN_CHARS else message.text[:SHOWN_CHARS] + "…"
        table.add_row(message.id, format_time(message.created_at or 0) or "-", _who(message), text)
    Console(width=200).print(table)


def _print_entities(store: Any, user: str, project: str) -> None:
    """The user's entities, most mentioned first (:mod:`fastaiagent.recall.entity_store`)."""
    from rich.console import Console
    from rich.table import Table

    from fastaiagent.recall.entity_store import user_entities

    found = user_entities(store, user, project)
    if not found:
        typer.echo("no entities")
        return
    table = Table("name", "kind", "also called", "mentions", box=None)
    for entity in sorted(found, key=lambda e: (-e.mentions, e.name)):
        others = ", ".join(alias for alias in entity.aliases if alias != entity.name)
        table.add_row(entity.name, entity.kind, others or "-", str(entity.mentions))
    Console(width=200).print(table)


def messages(
    user: str = user_option("The user whose recalled messages to show.", ...),
    search: str | None = typer.Option(
        None, "--search", help="Only messages recall finds by these words, best first."
    ),
    limit: int = limit_option(20, "At most this many messages (a page)."),
    page: int = typer.Option(1, "--page", help="Which page, newest first (1 is the newest)."),
    delete: str | None = typer.Option(
        None, "--delete", help="Delete the user's message with this id (from every copy recall reads)."
    ),
    entities: bool = typer.Option(
        False, "--entities", help="List the people and things the user talks about instead."
    ),
    location: str = location_option(),
    project: str = project_option("", "Project partition."),
) -> None:
    """A user's recalled messages, newest first, a page at a time; --search, --delete one;
    --entities: the things they talk about."""
    from fastaiagent.facts import messages as stored
    from fastaiagent.facts.factory import make_fact_store

    with checking_options():
        if user == "*":
            raise InvalidValueError("--user names one user (messages are shown one user at a time)")
        identifier("--user", user)
        checked_project(project)
        positive_int("--limit", limit)
        positive_int("--page", page)
        if delete is not None and search is not None:
            raise InvalidValueError("--delete deletes one message: give it without --search")
        store = make_fact_store(location)
    if entities:
        _print_entities(store, user, project)
        return
    if delete is not None:
        from fastaiagent.recall.entity_store import delete_message  # the user's entities too

        if not delete_message(store, user, delete, project):
            typer.echo(f"error: user {user!r} has no message {delete!r}", err=True)
            raise typer.Exit(code=1)
        typer.echo(f"deleted message {delete}")
        return
    if search is not None:
        with checking_options():
            found = stored.search_messages(store, user, search, project, limit=limit)
    else:
        found = stored.list_messages(store, user, project, limit=limit, offset=(page - 1) * limit)
    total = stored.count_messages(store, user, project)
    if not found:
        typer.echo("no messages" if total == 0 or search is not None else f"no messages on page {page}")
        return
    _print(found)
    if search is None:
        first = (page - 1) * limit + 1
        typer.echo(f"messages {first}-{first + len(found) - 1} of {total}, newest first")


def register(app: typer.Typer) -> None:
    """Add ``messages`` to the ``memory`` sub-app."""
    app.command("messages")(messages)
