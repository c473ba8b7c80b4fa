"""``fastaiagent ui``: serve the local UI."""

from __future__ import annotations

import os

import typer

from fastaiagent._serving import listen
from fastaiagent._validate import port as port_option
from fastaiagent.cli.failures import checking_options
from fastaiagent.cli.options import location_option, trace_db_option
from fastaiagent.facts.factory import make_fact_store
from fastaiagent.ui.server import DEFAULT_HOST, DEFAULT_PORT, check_bind, serve_on

TOKEN_ENV = "FASTAIAGENT_UI_TOKEN"


def ui(
    location: str = location_option(),
    host: str = typer.Option(DEFAULT_HOST, help="Address to bind; other than loopback needs --token."),
    port: int = typer.Option(DEFAULT_PORT, help="Port to listen on."),
    token: str | None = typer.Option(
        None, help=f"Require this token to view pages (or set {TOKEN_ENV})."
    ),
    trace_db: str | None = trace_db_option(
        "Local trace store (default: $FASTAIAGENT_TRACE_DB, else traces.db in the folder "
        "of the default local database: ./.fastaiagent/, or that of "
        "$FASTAIAGENT_LOCAL_DB; never beside a --location path)."
    ),
) -> None:
    """Browse durable facts (Memory) and runs (Traces) in a local web UI."""
    source = "--token" if token else TOKEN_ENV
    token = token or os.environ.get(TOKEN_ENV) or None

    def announce(url: str) -> None:
        typer.echo(announcement(url, source if token else None))

    # Bad --host / --port / --token exit 2 before anything is printed; a port in use exits 1.
    with checking_options():
        check_bind(host, token)
        port_number = port_option("--port", port)
        store = make_fact_store(location)
        sock = listen(host, port_number)
    serve_on(sock, store, token=token, trace_db=trace_db, announce=announce)


def announcement(url: str, token_source: str | None) -> str:
    """What ``fastaiagent ui`` prints once it serves. Never the token: terminals,
    logs and screen shares keep what is printed; it says where the token is set."""
    line = f"fastaiagent UI on {url}/  (Ctrl+C to stop)"
    if token_source is None:
        return line
    where = "the value passed with --token" if token_source == "--token" else f"the value of ${token_source}"
    return f"{line}\nIt needs its token: open {url}/?token=<token>, where <token> is {where}."


def register(app: typer.Typer) -> None:
    """Add the ``ui`` command to the ``fastaiagent`` CLI."""
    app.command("ui")(ui)
