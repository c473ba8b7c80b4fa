"""``fastaiagent learn``: mine past runs into facts, list facts, supersede one with another."""

from __future__ import annotations

from typing import Any

import typer

from fastaiagent._format import format_time
from fastaiagent._validate import positive_int
from fastaiagent.cli.failures import checking_options
from fastaiagent.cli.options import LOCATION_HELP, PROJECT_FLAGS
from fastaiagent.errors import InvalidValueError
from fastaiagent.facts.fact import SCOPES

learn_app = typer.Typer(
    help="The Trace Learning Loop: durable facts from past runs, and the facts it keeps.",
    invoke_without_command=True,
    no_args_is_help=False,
)



@learn_app.callback()
def mine(
    ctx: typer.Context,
    location: str = typer.Option("sqlite", "--location", "-l", help=LOCATION_HELP),
    trace_db: str | None = typer.Option(None, "--trace-db", help="Local trace store to mine."),
    provider: str = typer.Option("openai", help="LLM provider for the extractor."),
    model: str | None = typer.Option(None, help="LLM model for the extractor (required)."),
    base_url: str | None = typer.Option(None, "--base-url", help="API base URL (e.g. a local server)."),
    scope: str = typer.Option("agent", help="Scope to file facts under: agent, user or project."),
    scope_id: str | None = typer.Option(
        None, "--scope-id", help="Subject id; default for agent scope: each run's agent name."
    ),
    project: str = typer.Option("", *PROJECT_FLAGS, help="Project partition."),
    allow_personal: bool = typer.Option(
        False, "--allow-personal", help="Allow user/project scope (personal data)."
    ),
    limit: int = typer.Option(50, help="How many recent runs to read."),
    agent: str | None = typer.Option(None, help="Only runs of this agent."),
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


def _parse_filter(value: str | None) -> tuple[str | None, str | None]:
    if not value:
        return None, None
    scope, _, scope_id = value.partition(":")
    if scope not in SCOPES:
        raise InvalidValueError(f"--scope must be one of {SCOPES}, optionally with :id (e.g. user:alice)")
    return scope, (scope_id if _ else None)


@learn_app.command("list")
def list_facts(
    location: str = typer.Option("sqlite", "--location", "-l", help=LOCATION_HELP),
    scope: str | None = typer.Option(None, help="Filter: agent, user:alice, project:acme ..."),
    project: str | None = typer.Option(None, *PROJECT_FLAGS, help="Filter by project partition."),
    show_superseded: bool = typer.Option(False, "--show-superseded", help="Include replaced facts."),
    limit: int = typer.Option(20, help="At most this many facts (after filtering)."),
) -> None:
    """List facts, newest first; filters apply before the limit."""
    from rich.console import Console
    from rich.table import Table

    from fastaiagent.facts.factory import make_fact_store

    with checking_options():
        scope_name, scope_id = _parse_filter(scope)
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
    location: str = typer.Option("sqlite", "--location", "-l", help=LOCATION_HELP),
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
