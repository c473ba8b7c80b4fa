"""The ``fastaiagent`` command. Each feature registers its own sub-command module."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(help="fastaiagent: agent memory tools.", no_args_is_help=True)

# (module, attribute): each module defines a typer app or command function.
_SUBCOMMANDS: list[tuple[str, str, str]] = [
    ("fastaiagent.ui.cli", "register", "ui"),
    ("fastaiagent.learn.cli", "register", "learn"),
    ("fastaiagent.plane_server", "register", "plane"),
    ("fastaiagent.demo", "register", "demo"),
]


def _register() -> None:
    for module_name, attribute, _label in _SUBCOMMANDS:
        module = importlib.import_module(module_name)
        getattr(module, attribute)(app)


@app.command()
def version() -> None:
    """Print the installed version."""
    from fastaiagent import __version__

    typer.echo(__version__)


def main() -> None:
    _register()
    app()


if __name__ == "__main__":
    main()
