"""The ``fastaiagent`` command. Each feature registers its own sub-command module."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(help="fastaiagent: agent memory tools.", no_args_is_help=True)

# (module, attribute): each module defines a typer app or command function.
_SUBCOMMANDS: list[tuple[str, str, str]] = [
    ("fastaiagent.cli.ui", "register", "ui"),
    ("fastaiagent.cli.learn", "register", "learn"),
    ("fastaiagent.cli.plane", "register", "plane"),
    ("fastaiagent.demo", "register", "demo"),
]


def _register() -> None:
    for module_name, attribute, _label in _SUBCOMMANDS:
        module = importlib.import_module(module_name)
        getattr(module, attribute)(app)


@app.command()
def version() -> None:
    """Print the installed version."""
    from fastaiagent._version import __version__

    typer.echo(__version__)


def main() -> None:
    _register()
    app()


if __name__ == "__main__":
    main()
