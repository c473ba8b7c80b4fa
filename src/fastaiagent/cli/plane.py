"""``fastaiagent plane serve``: the self-hosted plane from the shell."""

from __future__ import annotations

from typing import Any

from fastaiagent._optional import require
from fastaiagent.plane.server import FACTS_PATH, RANKERS, create_plane_app


def register(app: Any) -> None:
    """Add ``fastaiagent plane serve`` to the CLI."""
    import typer

    plane_app = typer.Typer(help="A self-hosted plane serving curated facts.", no_args_is_help=True)

    @plane_app.command("serve")
    def serve(
        location: str = typer.Option(
            "sqlite", "--location", help="sqlite, sqlite:///path.db, postgres://... or redis://..."
        ),
        api_key: str = typer.Option(
            ..., "--api-key", envvar="FASTAIAGENT_PLANE_API_KEY", help="key clients must send"
        ),
        host: str = typer.Option("127.0.0.1", "--host"),
        port: int = typer.Option(8765, "--port"),
        project_id: str = typer.Option("", "--project-id", help="tenant partition to serve"),
        ranking: str = typer.Option("keyword", "--ranking", help="keyword, semantic or none"),
    ) -> None:
        """Serve GET /public/v1/memory/facts from LOCATION's agent-scope facts."""
        if ranking not in RANKERS:
            raise typer.BadParameter(f"choose one of {sorted(RANKERS)}", param_hint="--ranking")
        uvicorn = require("uvicorn", "ui")
        try:
            web = create_plane_app(
                location, api_key, project_id=project_id, ranker=RANKERS[ranking]()
            )
        except (ValueError, TypeError, ImportError) as exc:
            raise typer.BadParameter(str(exc)) from exc
        typer.echo(f"plane serving {location} on http://{host}:{port}{FACTS_PATH}")
        uvicorn.run(web, host=host, port=port, log_level="warning")

    app.add_typer(plane_app, name="plane")
