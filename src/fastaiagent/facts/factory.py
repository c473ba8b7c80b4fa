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
    missing = _missing_methods(location)
    if missing and len(missing) < len(_PROTOCOL_METHODS):  # meant as a store, but incomplete
        raise InvalidTypeError(
            f"{type(location).__name__} is not a complete FactStore: it lacks "
            f"{', '.join(missing)} (see docs/backends.md, writing your own store)"
        )
    raise InvalidTypeError(
        f"location must be a string or a FactStore instance, got {type(location).__name__}"
    )


_PROTOCOL_METHODS = sorted(
    name for name in vars(FactStore) if not name.startswith("_") and callable(vars(FactStore)[name])
)


def _missing_methods(candidate: object) -> list[str]:
    return [name for name in _PROTOCOL_METHODS if not callable(getattr(candidate, name, None))]
