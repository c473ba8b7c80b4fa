"""``fastaiagent ui``: serve the local UI."""

from __future__ import annotations

import os

import typer

from fastaiagent.ui.server import DEFAULT_HOST, DEFAULT_PORT, check_bind

TOKEN_ENV = "FASTAIAGENT_UI_TOKEN"


def ui(
    location: str = typer.Option(
        "sqlite", "--location", "-l", help="Fact store: sqlite, sqlite:///path, postgres://..., redis://..."
    ),
    host: str = typer.Option(DEFAULT_HOST, help="Address to bind; other than loopback needs --token."),
    port: int = typer.Option(DEFAULT_PORT, help="Port to listen on."),
    token: str | None = typer.Option(
        None, help=f"Require this token to view pages (or set {TOKEN_ENV})."
    ),
    trace_db: str | None = typer.Option(
        None, "--trace-db", help="Local trace store (default: traces.db beside the fact db)."
    ),
) -> None:
    """Browse durable facts (Memory) and runs (Traces) in a local web UI."""
    token = token or os.environ.get(TOKEN_ENV) or None
    try:
        check_bind(host, token)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc
    from fastaiagent.ui.server import serve

    suffix = f"/?token={token}" if token else "/"
    typer.echo(f"fastaiagent UI on http://{host}:{port}{suffix}  (Ctrl+C to stop)")
    serve(location, host=host, port=port, token=token, trace_db=trace_db)


def register(app: typer.Typer) -> None:
    """Add the ``ui`` command to the ``fastaiagent`` CLI."""
    app.command("ui")(ui)
