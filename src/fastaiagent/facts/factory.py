"""Turn a ``location`` (string or store instance) into a FactStore."""

from __future__ import annotations

from typing import Any

from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.store import FactStore

POSTGRES_SCHEMES = ("postgres://", "postgresql://")
REDIS_SCHEMES = ("redis://", "rediss://")


def make_fact_store(location: Any = "sqlite") -> FactStore:
    """``"sqlite"`` (the local default), ``postgres://``/``postgresql://``,
    ``redis://``/``rediss://`` URLs, or any object implementing FactStore.

    Raises ValueError for an unknown string, TypeError for anything else, and
    ImportError naming the extra when a backend's driver is missing.
    """
    if isinstance(location, str):
        if location == "sqlite":
            from fastaiagent.facts.sqlite import SQLiteFactStore

            return SQLiteFactStore()
        if location.startswith("sqlite:///"):
            from fastaiagent.facts.sqlite import SQLiteFactStore

            return SQLiteFactStore(location[len("sqlite:///") :])
        if location.startswith(POSTGRES_SCHEMES):
            from fastaiagent.facts.postgres import PostgresFactStore

            return PostgresFactStore(location)
        if location.startswith(REDIS_SCHEMES):
            from fastaiagent.facts.redis import RedisFactStore

            return RedisFactStore(location)
        raise InvalidValueError(
            f"unsupported location {location!r}: use 'sqlite', 'sqlite:///path.db', "
            "'postgres://...', 'postgresql://...', 'redis://...', 'rediss://...' "
            "or a FactStore instance"
        )
    if isinstance(location, FactStore):
        return location
    raise InvalidTypeError(
        f"location must be a string or a FactStore instance, got {type(location).__name__}"
    )
