"""How every ``fastaiagent`` command fails: one line on stderr, a non-zero exit code.

:func:`guard` wraps each registered command (``fastaiagent.cli`` applies it to
all of them), so a command only raises; it never formats its own errors.

Exit codes: ``2`` when the options cannot be used (a command checks them inside
:func:`checking_options`; click's own parsing errors use 2 as well), ``1`` when
the work itself failed (a store outage or a damaged database, a missing extra,
a fact that does not exist, ...). ``--debug`` or ``FASTAIAGENT_DEBUG=1`` lets
the exception through with its full traceback instead.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import typer

from fastaiagent._format import MAX_REASON, one_line
from fastaiagent.errors import (
    FastAIAgentError,
    PolicyError,
    StoreConfigError,
    StoreCorruptError,
    StoreUnavailableError,
)

DEBUG_ENV = "FASTAIAGENT_DEBUG"
DEBUG_HINT = f"rerun with --debug (or {DEBUG_ENV}=1) for the traceback"
STORE_HINT = "check that the server is running and that --location is right"
SQLITE_HINT = "check that --location (or --trace-db) names a fastaiagent SQLite database you can read"
EXIT_FAILED = 1
EXIT_BAD_OPTIONS = 2
_GUARDED = "__fastaiagent_guarded__"
# typer's own ways out (typer.Exit, usage errors): they already say what to do.
_PASS_THROUGH = (typer.Exit, typer.Abort, typer.TyperException)
_debug_flag = False

F = TypeVar("F", bound=Callable[..., Any])


class OptionsError(FastAIAgentError):
    """A command's options cannot be used; the command exits with code 2."""


@contextmanager
def checking_options() -> Iterator[None]:
    """Treat a ValueError, TypeError or PolicyError raised inside as bad options (exit 2)."""
    try:
        yield
    except (ValueError, TypeError, PolicyError) as exc:
        raise OptionsError(one_line(exc)) from exc


def _driver_errors() -> tuple[type[BaseException], ...]:
    """Errors of the database drivers: sqlite3's, and psycopg's and redis-py's when
    they are loaded (neither is imported just to check)."""
    found: list[type[BaseException]] = [sqlite3.Error]
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        found.append(psycopg.Error)
    redis_errors = sys.modules.get("redis.exceptions")
    if redis_errors is not None:
        found.append(redis_errors.RedisError)
    return tuple(found)


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what it was raised from (``__cause__``), and so on down the chain."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__


def _names_its_fix(exc: BaseException) -> bool:
    """True for a store error of the library's driver-error classification
    (``sqlite_failure``, ``redis_failure``, Postgres' ``statement_failure`` ...):
    a StoreCorruptError, StoreConfigError or StoreUnavailableError raised from
    the driver's error, whose message names the file or URL and the fix.

    A pool that gave no connection in time is the exception: its message says
    what happened, not what to do."""
    if not isinstance(exc, (StoreCorruptError, StoreConfigError, StoreUnavailableError)):
        return False
    cause = exc.__cause__
    if cause is None or not isinstance(cause, _driver_errors()):
        return False
    return type(cause).__name__ != "PoolTimeout"


def _keeping_the_fix(exc: BaseException, limit: int = 2 * MAX_REASON) -> str:
    """``exc`` as one line for a message that ends with its fix: up to ``limit``
    characters, and a longer one cut in the middle (the driver's reason), so both
    what failed, at the start, and what to do, at the end, are still there."""
    return one_line(one_line(exc, limit=sys.maxsize).rstrip("."), limit)


def explain(exc: Exception) -> tuple[str, int]:
    """The one-line message (naming the fix) and the exit code for a failed command.

    The whole cause chain is read, so a store error the UI or the plane server
    wrapped ("the fact store failed: ...") is explained as the store's own: no
    second fix after a message that already names one (the library's store
    errors do), the SQLite hint for a SQLite failure, the server hint for an
    outage.
    """
    reason = one_line(exc).rstrip(".")
    if isinstance(exc, OptionsError):
        return reason, EXIT_BAD_OPTIONS
    if isinstance(exc, ImportError):
        if "pip install" not in reason:
            reason += " (install the extra that provides it, e.g. pip install 'fastaiagent[all]')"
        return reason, EXIT_FAILED
    chain = list(_causes(exc))
    if any(_names_its_fix(error) for error in chain):
        return _keeping_the_fix(exc), EXIT_FAILED
    if isinstance(exc, sqlite3.Error):
        return f"the SQLite database cannot be used: {reason}; {SQLITE_HINT}", EXIT_FAILED
    if any(isinstance(error, sqlite3.Error) for error in chain):  # wrapped SQLite errors
        return f"{reason}; {SQLITE_HINT}", EXIT_FAILED
    drivers = _driver_errors()
    if isinstance(exc, ConnectionError) or any(isinstance(error, drivers) for error in chain):
        return f"{reason}; {STORE_HINT}", EXIT_FAILED
    if isinstance(exc, (FastAIAgentError, ValueError, TypeError, LookupError, OSError)):
        return reason, EXIT_FAILED
    return f"unexpected {type(exc).__name__}: {reason} ({DEBUG_HINT})", EXIT_FAILED


def set_debug(enabled: bool) -> None:
    """Record ``--debug`` for this invocation (the root command's callback calls it)."""
    global _debug_flag
    _debug_flag = enabled


def debugging() -> bool:
    """True when ``--debug`` was passed or ``FASTAIAGENT_DEBUG`` is set to a true value."""
    return _debug_flag or os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def guard(command: F) -> F:
    """``command``, failing with ``error: <message>`` and an exit code instead of a traceback."""
    if getattr(command, _GUARDED, False):
        return command

    @functools.wraps(command)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except _PASS_THROUGH:
            raise
        except Exception as exc:
            if debugging():
                raise
            message, code = explain(exc)
            typer.echo(f"error: {message}", err=True)
            raise typer.Exit(code) from None

    setattr(guarded, _GUARDED, True)
    return guarded  # type: ignore[return-value]


def guard_all(app: typer.Typer) -> None:
    """Apply :func:`guard` to every command and callback of ``app`` and its sub-apps."""
    if app.registered_callback is not None and app.registered_callback.callback is not None:
        app.registered_callback.callback = guard(app.registered_callback.callback)
    for info in app.registered_commands:
        if info.callback is not None:
            info.callback = guard(info.callback)
    for group in app.registered_groups:
        if group.typer_instance is not None:
            guard_all(group.typer_instance)
