"""Turn a ``location`` (string or store instance) into a FactStore."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.locations import (
    check_postgres_url,
    check_redis_url,
    check_sqlite_options,
    unsupported,
)
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


def split_location_option(url: str, name: str) -> tuple[str, str | None]:
    """``url`` without its ``name=`` query option, and that option's value (None
    when absent). The option is fastaiagent's, not the driver's, so it is taken
    out before the URL reaches psycopg or redis-py; other query options stay."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    values = [value for key, value in pairs if key == name]
    if not values:
        return url, None
    if len(values) > 1 or not values[0]:
        raise InvalidValueError(f"{url!r}: give the {name}= option once, with a value")
    kept = urlencode([(key, value) for key, value in pairs if key != name])
    return urlunsplit(parts._replace(query=kept)), values[0]


def make_fact_store(location: Any = "sqlite") -> FactStore:
    """``"sqlite"`` (the local default), ``sqlite:///relative.db`` /
    ``sqlite:////absolute.db`` (see :func:`sqlite_url_path`),
    ``postgres://``/``postgresql://``, ``redis://``/``rediss://`` URLs, or any
    object implementing FactStore.

    A Postgres URL may name its table (``?table=support_memory``, default
    ``learned_memory``) and the pooler in between (``?pooler=transaction`` for
    PgBouncer's transaction mode), and a Redis URL its key prefix (``?prefix=support``,
    default ``fastaiagent``), so several applications (or test runs) share one
    server without sharing memory, from any door that takes a location string.
    ``?cluster=true`` on a Redis URL opens a Redis Cluster through that node
    (``?wait_replicas=N``: replicas each write waits for, default 1; see
    :class:`~fastaiagent.facts.redis.store.RedisFactStore`).

    Every query option is checked here, before a driver sees the URL (see
    :mod:`fastaiagent.facts.locations`): an unknown one raises InvalidValueError
    naming it, the closest option that exists and all of them; SQLite locations
    take none. A string of no supported form names the form it resembles
    (``sqlite://x.db`` -> ``sqlite:///x.db``).

    An explicit SQLite path whose folder does not exist raises
    :class:`~fastaiagent.errors.NotFoundError` (a ValueError) at first use.

    Raises ValueError for an unknown string, TypeError for anything else, and
    ImportError naming the extra when a backend's driver is missing.
    """
    if isinstance(location, str):
        return _store_at(location)
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


def _store_at(location: str) -> FactStore:
    """The store a location string names, its options checked first."""
    if location == "sqlite":
        from fastaiagent.facts.sqlite.store import SQLiteFactStore

        return SQLiteFactStore()
    if location.startswith(SQLITE_PREFIX):
        from fastaiagent.facts.sqlite.store import SQLiteFactStore

        check_sqlite_options(location)
        return SQLiteFactStore(sqlite_url_path(location))
    if location.startswith(POSTGRES_SCHEMES):
        from fastaiagent.facts.postgres.store import DEFAULT_TABLE, PostgresFactStore

        check_postgres_url(location)  # every option, before libpq sees the URL
        url, table = split_location_option(location, "table")
        url, pooler = split_location_option(url, "pooler")
        return PostgresFactStore(url, table=table or DEFAULT_TABLE, pooler=pooler)
    if location.startswith(REDIS_SCHEMES):
        from fastaiagent.facts.redis.store import RedisFactStore

        check_redis_url(location)  # every option, before redis-py sees the URL
        url, prefix = split_location_option(location, "prefix")
        return RedisFactStore(url) if prefix is None else RedisFactStore(url, prefix=prefix)
    raise unsupported(location)


_PROTOCOL_METHODS = sorted(
    name for name in vars(FactStore) if not name.startswith("_") and callable(vars(FactStore)[name])
)


def _missing_methods(candidate: object) -> list[str]:
    return [name for name in _PROTOCOL_METHODS if not callable(getattr(candidate, name, None))]
