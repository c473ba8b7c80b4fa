"""``fastaiagent plane serve``: the self-hosted plane from the shell."""

from __future__ import annotations

from typing import Any

from fastaiagent import _serving, _validate
from fastaiagent.cli.failures import checking_options
from fastaiagent.cli.options import location_option, project_option
from fastaiagent.facts.factory import make_fact_store
from fastaiagent.plane.protocol import FACTS_PATH
from fastaiagent.plane.server import RANKERS, check_store, create_plane_app


def serve(
    location: str, api_key: str, *, host: str, port: int, project_id: str, ranking: str
) -> None:
    """Check everything, say where, then serve until interrupted.

    Bad options (ranking, host, port, location) fail before anything is
    printed; so do a port in use and a store that cannot be read.
    """
    import typer

    with checking_options():
        _validate.one_of("--ranking", ranking, tuple(RANKERS))
        port_number = _validate.port("--port", port)
        store = make_fact_store(location)
        sock = _serving.listen(host, port_number)
    try:
        check_store(store)
        with checking_options():
            web = create_plane_app(store, api_key, project_id=project_id, ranker=RANKERS[ranking]())
    except BaseException:
        sock.close()
        raise
    typer.echo(f"plane serving {location} on {_serving.url(sock)}{FACTS_PATH}")
    _serving.run(web, sock)


def register(app: Any) -> None:
    """Add ``fastaiagent plane serve`` to the CLI."""
    import typer

    plane_app = typer.Typer(help="A self-hosted plane serving curated facts.", no_args_is_help=True)

    @plane_app.command("serve")
    def serve_command(
        location: str = location_option(),
        api_key: str = typer.Option(
            ..., "--api-key", envvar="FASTAIAGENT_PLANE_API_KEY", help="key clients must send"
        ),
        host: str = typer.Option("127.0.0.1", "--host"),
        port: int = typer.Option(8765, "--port", help="0..65535 (0 picks a free port)"),
        project_id: str = project_option("", "Tenant partition to serve."),
        ranking: str = typer.Option("keyword", "--ranking", help="keyword, semantic or none"),
    ) -> None:
        """Serve GET /public/v1/memory/facts from LOCATION's agent-scope facts."""
        serve(location, api_key, host=host, port=port, project_id=project_id, ranking=ranking)

    app.add_typer(plane_app, name="plane")
