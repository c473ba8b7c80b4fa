"""``fastaiagent learn``: mine past runs into facts, list facts, supersede one with another.

Where facts go is ``--subject``: ``agent`` (each run's agent name, the default),
``agent:support``, or ``user:alice`` / ``project:acme`` with ``--allow-personal``.
"""

from __future__ import annotations

from typing import Any

import typer

from fastaiagent._format import format_time
from fastaiagent._validate import positive_int
from fastaiagent.cli.failures import checking_options
from fastaiagent.cli.old_spellings import deprecated_option
from fastaiagent.cli.options import (
    SUBJECT_FLAG,
    agent_option,
    limit_option,
    location_option,
    parse_subject,
    project_option,
    subject_option,
    trace_db_option,
)
from fastaiagent.errors import InvalidValueError

learn_app = typer.Typer(
    help="The Trace Learning Loop: durable facts from past runs, and the facts it keeps.",
    invoke_without_command=True,
    no_args_is_help=False,
)


@learn_app.callback()
def mine(
    ctx: typer.Context,
    location: str = location_option(),
    trace_db: str | None = trace_db_option("Local trace store to mine."),
    provider: str = typer.Option("openai", help="LLM provider for the extractor."),
    model: str | None = typer.Option(None, help="LLM model for the extractor (required)."),
    base_url: str | None = typer.Option(None, "--base-url", help="API base URL (e.g. a local server)."),
    subject: str = subject_option(
        "agent",
        "Where facts go: agent (each run's agent name), agent:NAME, user:ID or project:ID.",
    ),
    old_scope_id: str | None = deprecated_option("--scope-id", "--subject scope:id"),
    project: str = project_option("", "Project partition."),
    allow_personal: bool = typer.Option(
        False, "--allow-personal", help="Allow user/project scope (personal data)."
    ),
    limit: int = limit_option(50, "How many recent runs to read."),
    agent: str | None = agent_option("Only runs of this agent."),
    remine: bool = typer.Option(False, help="Mine runs already mined before."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the facts, write nothing."),
) -> None:
    """Mine recent runs from the local trace store into durable facts."""
    if ctx.invoked_subcommand is not None:
        return
    from fastaiagent.facts.factory import make_fact_store
    from fastaiagent.learn.loop import check_target
    from fastaiagent.llm.client import LLMClient

    with checking_options():
        scope, scope_id = _target(subject, old_scope_id)
        check_target(scope, scope_id, allow_personal=allow_personal)
        positive_int("--limit", limit)
        if not model:
            raise InvalidValueError("the extractor needs an LLM: pass --model (and --provider)")
        llm = LLMClient(provider=provider, model=model, base_url=base_url)
        store = make_fact_store(location)
    report = _mine_with_progress(
        llm,
        location=store,
        trace_store=trace_db,
        scope=scope,
        scope_id=scope_id,
        project_id=project,
        allow_personal=allow_personal,
        limit=limit,
        agent=agent,
        remine=remine,
        dry_run=dry_run,
    )
    _print_report(report)


def _mine_with_progress(llm: Any, **options: Any) -> Any:
    """:func:`learn_from_traces` with a progress bar on the terminal."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from fastaiagent.learn.loop import learn_from_traces

    with Progress(
        TextColumn("mining runs"), BarColumn(), MofNCompleteColumn(), transient=True
    ) as progress:
        task = progress.add_task("mine", total=None)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        return learn_from_traces(llm, on_progress=advance, **options)


def _print_report(report: Any) -> None:
    """What mining did; exit code 1 when some runs could not be mined."""
    for trace_id, subject, text in report.proposed:
        typer.echo(f"would learn  {subject}  {text}  (trace {trace_id[:8]})")
    for trace_id, error in report.failures:
        typer.echo(f"failed       trace {trace_id[:8]}: {error}", err=True)
    typer.echo(
        f"{report.runs_seen} runs read, {report.runs_mined} mined, {report.runs_skipped} skipped; "
        f"{len(report.facts_added)} facts learned, {len(report.facts_superseded)} superseded"
    )
    if report.failures:
        raise typer.Exit(code=1)


def _target(subject: str, old_scope_id: str | None) -> tuple[str, str | None]:
    """The scope and id mining writes under: ``--subject scope[:id]`` (the old
    ``--scope X --scope-id Y`` arrives as ``--subject X`` and ``Y``)."""
    if old_scope_id is not None:
        if ":" in subject:
            raise InvalidValueError(f"give the id once: {SUBJECT_FLAG} scope:id (--scope-id is its old spelling)")
        subject = f"{subject}:{old_scope_id}"
    scope, colon, scope_id = subject.partition(":")
    if not colon and scope in ("user", "project"):
        raise InvalidValueError(f"{SUBJECT_FLAG} {scope} needs an id: {SUBJECT_FLAG} {scope}:ID")
    return scope, (scope_id if colon else None)


@learn_app.command("list")
def list_facts(
    location: str = location_option(),
    subject: str | None = subject_option(None, "Filter: agent, user:alice, project:acme ..."),
    project: str | None = project_option(None, "Filter by project partition."),
    show_superseded: bool = typer.Option(False, "--show-superseded", help="Include replaced facts."),
    limit: int = limit_option(20, "At most this many facts (after filtering)."),
) -> None:
    """List facts, newest first; filters apply before the limit."""
    from rich.console import Console
    from rich.table import Table

    from fastaiagent.facts.factory import make_fact_store

    with checking_options():
        scope_name, scope_id = parse_subject(subject, required=False)
        positive_int("--limit", limit)
        store = make_fact_store(location)
    facts = store.browse(
        scope=scope_name,
        scope_id=scope_id,
        project_id=project,
        include_superseded=show_superseded,
        limit=limit,
    )
    table = Table("id", "fact", "scope", "source", "confidence", "created", box=None)
    for fact in facts:
        text = fact.fact + (f"  (superseded → #{fact.superseded_by})" if fact.superseded_by else "")
        trace = fact.source_trace_id
        source = f"{fact.source_words} (trace {trace[:8]})" if trace else fact.source_words
        table.add_row(
            str(fact.id), text, fact.subject, source, f"{fact.confidence:.2f}", format_time(fact.created_at)
        )
    Console(width=200).print(table) if facts else typer.echo("no facts")


@learn_app.command("supersede")
def supersede(
    old: int = typer.Argument(..., help="Id of the fact being replaced."),
    new: int = typer.Argument(..., help="Id of the fact replacing it (same scope, id and project)."),
    location: str = location_option(),
) -> None:
    """Mark fact OLD as replaced by fact NEW (OLD stays as history)."""
    from fastaiagent.facts.factory import make_fact_store

    with checking_options():
        store = make_fact_store(location)
    store.supersede(old, new)  # a refusal (other subject, unknown id) is a failure: exit 1
    typer.echo(f"#{old} superseded by #{new}")


def register(app: typer.Typer) -> None:
    """Add the ``learn`` sub-app to the ``fastaiagent`` CLI."""
    app.add_typer(learn_app, name="learn")
