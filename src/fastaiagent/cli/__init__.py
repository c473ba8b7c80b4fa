"""The ``fastaiagent`` command. Each feature registers its own sub-command module.

Every command fails the same way (see :mod:`fastaiagent.cli.failures`): one
``error: ...`` line on stderr and a non-zero exit code; ``--debug`` or
``FASTAIAGENT_DEBUG=1`` shows the traceback instead.
"""

from __future__ import annotations

import importlib
import logging

import typer

from fastaiagent.cli.failures import DEBUG_ENV, guard_all, set_debug
from fastaiagent.cli.old_spellings import use_renamed_spellings

app = typer.Typer(help="fastaiagent: agent memory tools.", no_args_is_help=True)

# (module, attribute): each module defines a typer app or command function.
_SUBCOMMANDS: list[tuple[str, str, str]] = [
    ("fastaiagent.cli.ui", "register", "ui"),
    ("fastaiagent.cli.learn", "register", "learn"),
    ("fastaiagent.cli.memory", "register", "memory"),
    ("fastaiagent.cli.plane", "register", "plane"),
    ("fastaiagent.cli.mcp", "register", "mcp"),
    ("fastaiagent.demo", "register", "demo"),
]
# Loggers that repeat (per retry, or as an outage notice for agent runs) what
# the one error line already says.
_CHATTY_LOGGERS = ("psycopg.pool", "fastaiagent.facts.outage")
_registered = False


@app.callback()
def _options(
    debug: bool = typer.Option(
        False, "--debug", envvar=DEBUG_ENV, help="On failure, show the full traceback and driver logs."
    ),
) -> None:
    set_debug(debug)
    if not debug:
        for name in _CHATTY_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)


def _register() -> None:
    """Add every sub-command once, then make all of them fail with one line and
    take the old spellings of renamed options."""
    global _registered
    if _registered:
        return
    for module_name, attribute, _label in _SUBCOMMANDS:
        module = importlib.import_module(module_name)
        getattr(module, attribute)(app)
    guard_all(app)
    use_renamed_spellings(app)
    _registered = True


@app.command()
def version() -> None:
    """Print the installed version."""
    from fastaiagent._version import __version__

    typer.echo(__version__)


def main() -> None:
    """The ``fastaiagent`` entry point."""
    _register()
    app()


if __name__ == "__main__":
    main()
