"""Turn a ``location`` (string or store instance) into a FactStore."""

from __future__ import annotations

from typing import Any

from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.store import FactStore

POSTGRES_SCHEMES = ("postgres://", "postgresql://")
REDIS_SCHEMES = ("redis://", "rediss://")
SQLITE_PREFIX = "sqlite:///"


def sqlite_url_path(url: str) -> str:
    """The file path of a ``sqlite:///`` URL, read as SQLAlchemy reads it:
    ``sqlite:///relative/path.db`` is relative to the working directory and
    ``sqlite:////absolute/path.db`` (four slashes) is absolute."""
    path = url[len(SQLITE_PREFIX) :]
    if not path or path.endswith("/"):
        raise InvalidValueError(
            f"{url!r} names no database file: use 'sqlite:///relative/path.db' or "
            "'sqlite:////absolute/path.db' (four slashes), or 'sqlite' for the default file"
        )
    if path == ":memory:":
        raise InvalidValueError(
            "'sqlite:///:memory:' is not supported (each thread would get its own empty "
            "database): use a file path, e.g. a temporary folder in tests"
        )
    return path


def make_fact_store(location: Any = "sqlite") -> FactStore:
    """``"sqlite"`` (the local default), ``sqlite:///relative.db`` /
    ``sqlite:////absolute.db`` (see :func:`sqlite_url_path`),
    ``postgres://``/``postgresql://``, ``redis://``/``rediss://`` URLs, or any
    object implementing FactStore.

    An explicit SQLite path whose folder does not exist raises
    :class:`~fastaiagent.errors.NotFoundError` (a ValueError) at first use.

    Raises ValueError for an unknown string, TypeError for anything else, and
    ImportError naming the extra when a backend's driver is missing.
    """
    if isinstance(location, str):
        if location == "sqlite":
            from fastaiagent.facts.sqlite import SQLiteFactStore

            return SQLiteFactStore()
        if location.startswith(SQLITE_PREFIX):
            from fastaiagent.facts.sqlite import SQLiteFactStore

            return SQLiteFactStore(sqlite_url_path(location))
        if location.startswith(POSTGRES_SCHEMES):
            from fastaiagent.facts.postgres import PostgresFactStore

            return PostgresFactStore(location)
        if location.startswith(REDIS_SCHEMES):
            from fastaiagent.facts.redis import RedisFactStore

            return RedisFactStore(location)
        raise InvalidValueError(
            f"unsupported location {location!r}: use 'sqlite', 'sqlite:///relative/path.db', "
            "'sqlite:////absolute/path.db', "
            "'postgres://...', 'postgresql://...', 'redis://...', 'rediss://...' "
            "or a FactStore instance"
        )
    if isinstance(location, FactStore):
        return location
    raise InvalidTypeError(
        f"location must be a string or a FactStore instance, got {type(location).__name__}"
    )
