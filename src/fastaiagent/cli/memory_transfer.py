"""``fastaiagent memory export / import / copy``: move memory between locations.

The file is the versioned JSONL of :mod:`fastaiagent.facts.transfer`; an
import adds only what the target lacks, so it can be repeated. A progress bar
goes to stderr when it is a terminal (``--progress`` / ``--no-progress``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from fastaiagent._validate import identifier
from fastaiagent.cli.failures import checking_options
from fastaiagent.cli.options import (
    LOCATION_HELP,
    checked_project,
    location_option,
    project_option,
    user_option,
)
from fastaiagent.errors import InvalidValueError
from fastaiagent.facts.transfer import Counts

USER_HELP = "Only this user's memory (their facts, recalled messages, windows, items)."
PROGRESS_HELP = "Show a progress bar on stderr (default: when stderr is a terminal)."


class ProgressBar:
    """``[#####-----]  48%  12,000 of 25,000 · 3,100/s`` redrawn on stderr."""

    WIDTH = 30

    def __init__(self, total: int, shown: bool) -> None:
        self.total, self.shown, self.start = max(total, 1), shown, time.monotonic()

    def __call__(self, counts: Counts) -> None:
        if not self.shown:
            return
        seen = counts.seen
        share = min(seen / self.total, 1.0)
        filled = int(share * self.WIDTH)
        rate = seen / max(time.monotonic() - self.start, 1e-6)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        sys.stderr.write(f"\r[{bar}] {share:4.0%}  {seen:,} of ~{self.total:,} · {rate:,.0f}/s ")
        sys.stderr.flush()

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\n")


def _shown(progress: bool | None) -> bool:
    return sys.stderr.isatty() if progress is None else progress


def _summary(verb: str, counts: Counts) -> str:
    parts = [f"{counts.facts} fact(s)", f"{counts.recall} recalled message(s)",
             f"{counts.windows} window(s)", f"{counts.items} item(s)"]  # fmt: skip
    text = f"{verb} " + ", ".join(parts)
    if counts.kept:
        text += f"; {counts.kept} already there, kept"
    for why, n in sorted(counts.skipped.items()):
        text += f"; skipped {n} {why}"
    return text


def _user(user_id: str | None) -> str | None:
    if user_id in ("", "*"):
        raise InvalidValueError("--user needs one user id (leave it out for everyone)")
    return None if user_id is None else identifier("--user", user_id)


USER = user_option(USER_HELP)
PROJECT = project_option(None, "Only this project (default: all).")
PROGRESS = typer.Option(None, "--progress/--no-progress", help=PROGRESS_HELP)
LOCATION = location_option()


def _run(progress: bool | None, total: Callable[[], int], work: Callable[[ProgressBar], Counts], done: str) -> None:
    """Run ``work`` with a progress bar of about ``total()`` records, then print the counts."""
    shown = _shown(progress)
    bar = ProgressBar(total() if shown else 0, shown)
    counts = work(bar)
    bar.done()
    typer.echo(_summary(done, counts))


def export_command(
    out: Path = typer.Option(..., "--out", "-o", help="The JSONL file to write."),
    location: str = LOCATION,
    user_id: str | None = USER,
    project: str | None = PROJECT,
    progress: bool | None = PROGRESS,
) -> None:
    """Write a location's memory (or one user's) to a JSONL file."""
    from fastaiagent.facts.transfer import count_records, export_memory

    with checking_options():
        user, project = _user(user_id), checked_project(project)
    _run(
        progress,
        lambda: count_records(location, user_id=user, project_id=project),
        lambda bar: export_memory(location, out, user_id=user, project_id=project, progress=bar),
        f"exported to {out}:",
    )


def import_command(
    source: Path = typer.Argument(..., help="A file written by `fastaiagent memory export`."),
    location: str = LOCATION,
    everything: bool = typer.Option(
        False, "--all", help="Import a whole location's file, every line as written (an operator's move)."
    ),
    user_id: str | None = user_option("The user the file must hold (refused otherwise)."),
    project: str | None = project_option(None, "The project the file must hold."),
    progress: bool | None = PROGRESS,
) -> None:
    """Add a file's memory to a location; what it already holds is kept. A file of one
    user writes that user's memory only (checked line by line before anything is
    written); a whole location's file needs --all."""
    from fastaiagent.agent.memory_blocks.fact_policy import imported_fact_check
    from fastaiagent.facts.transfer import import_memory

    with checking_options():
        if not source.is_file():
            raise InvalidValueError(f"{source}: no such file")
        user = _user(user_id)
        if everything and (user is not None or project is not None):
            raise InvalidValueError("--all imports every line of the file: give it without --user or --project-id")
    scope: dict[str, Any] = {"everything": everything, "user_id": user, "project_id": project}
    check = None if everything else imported_fact_check(None)
    _run(
        progress,
        lambda: _lines(source) - 2,
        lambda bar: import_memory(location, source, **scope, fact_check=check, progress=bar),
        f"imported into {location}:",
    )


def copy_command(
    source: str = typer.Option(..., "--from", help="The location to read. " + LOCATION_HELP),
    target: str = typer.Option(..., "--to", help="The location to add to."),
    user_id: str | None = USER,
    project: str | None = PROJECT,
    progress: bool | None = PROGRESS,
) -> None:
    """Copy a location's memory (or one user's) into another, without a file."""
    from fastaiagent.facts.transfer import copy_memory, count_records

    with checking_options():
        user, project = _user(user_id), checked_project(project)
        if source == target:
            raise InvalidValueError("--from and --to name the same location")
    _run(
        progress,
        lambda: count_records(source, user_id=user, project_id=project),
        lambda bar: copy_memory(source, target, user_id=user, project_id=project, progress=bar),
        f"copied into {target}:",
    )


def _lines(path: Path) -> int:
    with path.open("rb") as stream:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: stream.read(1 << 20), b""))


def register(app: typer.Typer) -> None:
    """Add ``export``, ``import`` and ``copy`` to the ``memory`` sub-app."""
    app.command("export")(export_command)
    app.command("import")(import_command)
    app.command("copy")(copy_command)
