"""Connecting to Redis: a client gated by the server's outage health, and the
error an outage raises (:func:`unavailable`), shared by every Redis store."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastaiagent._optional import require
from fastaiagent.errors import StoreUnavailableError
from fastaiagent.facts import outage

redis_lib = require("redis", "redis")


@contextmanager
def unavailable(what: str) -> Iterator[None]:
    """Raise :class:`~fastaiagent.errors.StoreUnavailableError` (a ``ConnectionError``)
    for a Redis outage inside the block, classified by redis-py's exception type:
    refused or lost connections, timeouts, a server still loading its data, a
    read-only replica. Other errors (a wrong key type, a script bug) pass through.
    ``what`` names the store in the message, e.g. ``"the fact store"``."""
    errors = redis_lib.exceptions
    try:
        yield
    except (errors.AuthenticationError, errors.AuthorizationError) as exc:
        raise StoreUnavailableError(
            f"Redis refused the credentials for {what}: check the user and password "
            f"in the URL ({exc})"
        ) from exc
    except errors.BusyLoadingError as exc:
        raise StoreUnavailableError(
            f"Redis for {what} is still loading its data set: retry in a moment ({exc})"
        ) from exc
    except (errors.ReadOnlyError, errors.MasterDownError) as exc:
        raise StoreUnavailableError(
            f"Redis for {what} is a replica that cannot take writes: point the URL at "
            f"the primary ({exc})"
        ) from exc
    except (errors.ConnectionError, errors.TimeoutError) as exc:
        raise StoreUnavailableError(f"cannot reach Redis for {what}: {exc}") from exc


def guarded_client(url: str, **options: Any) -> Any:
    """A ``redis.Redis`` for ``url`` whose connections consult the server's shared
    :class:`~fastaiagent.facts.outage.StoreHealth` before connecting: while the
    server is paused a call raises at once instead of waiting out a timeout
    (options in the URL's query, e.g. ``socket_connect_timeout``, win)."""
    pool = redis_lib.ConnectionPool.from_url(url, **options)
    pool.connection_class = _guarded_class(
        pool.connection_class, outage.health(outage.server_name("Redis", url))
    )
    client = redis_lib.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True  # as Redis.from_url: close() closes the pool
    return client


def _guarded_class(base: type, health: outage.StoreHealth) -> type:
    """``base`` (plain, TLS or unix-socket connection) whose connect is gated by ``health``."""
    failures = (redis_lib.exceptions.ConnectionError, redis_lib.exceptions.TimeoutError)

    def connect_check_health(self: Any, *args: Any, **kwargs: Any) -> None:
        if self._sock:  # connected already: nothing to wait for
            return
        health.check(error=redis_lib.exceptions.ConnectionError)  # unavailable() words it
        try:
            base.connect_check_health(self, *args, **kwargs)  # type: ignore[attr-defined]
        except failures as exc:
            health.failed(" ".join(str(exc).split()))
            raise
        health.succeeded()

    return type(f"Guarded{base.__name__}", (base,), {"connect_check_health": connect_check_health})
