"""Connecting to Redis: a client gated by the server's outage health, and how a
redis-py error becomes the library's (:func:`unavailable`, :func:`redis_failure`),
shared by every Redis store."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastaiagent._optional import require
from fastaiagent.errors import (
    FastAIAgentError,
    InvalidValueError,
    StoreConfigError,
    StoreCorruptError,
    StoreUnavailableError,
)
from fastaiagent.facts import outage
from fastaiagent.facts.locations import redacted_url

redis_lib = require("redis", "redis")

_LOCATION = "fastaiagent_location"
"""The attribute a guarded connection sets on the errors of its connect: the
server's URL, password masked, for messages of callers that do not pass it."""


@contextmanager
def unavailable(what: str, url: str = "") -> Iterator[None]:
    """Raise the library's error for any redis-py error inside the block (see
    :func:`redis_failure`); ``what`` names the store in the message, e.g.
    ``"the fact store"``, and ``url`` its server (else the connection's, when the
    error came from connecting)."""
    errors = redis_lib.exceptions
    try:
        yield
    except (errors.RedisError, errors.RedisClusterException) as exc:
        raise redis_failure(exc, what, url) from exc


def redis_failure(exc: Exception, what: str, url: str = "") -> FastAIAgentError:
    """The library's error for a redis-py error, naming the server and the fix.

    :class:`~fastaiagent.errors.StoreConfigError`: rejected credentials or
    permissions, a DB index the server does not have, something other than Redis
    at the address, a cluster URL at a single server (or the other way round).
    :class:`~fastaiagent.errors.StoreCorruptError`: a key of the store holding
    another type (another program writes under its prefix).
    :class:`~fastaiagent.errors.StoreUnavailableError`: the rest: refused or lost
    connections, timeouts, a server still loading, a read-only replica, out of
    memory, a failed call.
    """
    errors = redis_lib.exceptions
    at = outage.server_name("Redis", url) if url else getattr(exc, _LOCATION, "") or "Redis"
    reason = " ".join(str(exc).split()) or type(exc).__name__
    upper = reason.upper()
    cluster_errors = (errors.RedisClusterException, errors.AskError, errors.ClusterError)
    if isinstance(exc, cluster_errors) or upper.startswith(
        ("MOVED", "ASK ", "CROSSSLOT", "CLUSTERDOWN")
    ) or "NON LOCAL KEY" in upper:
        return _cluster_failure(exc, what, at, reason)
    if isinstance(exc, (errors.AuthenticationError, errors.AuthorizationError)) or (
        upper.startswith(("NOAUTH", "WRONGPASS"))
    ):
        return StoreConfigError(
            f"Redis refused the credentials for {what} ({at}): check the user and password "
            f"in the URL ({reason})"
        )
    if isinstance(exc, errors.NoPermissionError) or upper.startswith("NOPERM"):
        return StoreConfigError(
            f"the Redis user of the URL may not do what {what} needs ({at}: {reason}): "
            "allow it the store's commands and keys in the server's ACL, or use another user"
        )
    if "DB INDEX" in upper:
        return StoreConfigError(
            f"{at} has no such database for {what} ({reason}): the number after the port "
            "in the URL must be a DB index the server has (0 to its 'databases' setting - 1, "
            "0-15 by default)"
        )
    if isinstance(exc, errors.BusyLoadingError):
        return StoreUnavailableError(
            f"Redis for {what} is still loading its data set ({at}): retry in a moment ({reason})"
        )
    if isinstance(exc, (errors.ReadOnlyError, errors.MasterDownError)):
        return StoreUnavailableError(
            f"Redis for {what} is a replica that cannot take writes ({at}): point the URL at "
            f"the primary ({reason})"
        )
    if isinstance(exc, (errors.ConnectionError, errors.TimeoutError)):
        return StoreUnavailableError(
            f"cannot reach Redis for {what}: {reason} ({at}; check that the server is up "
            "and the URL's host and port)"
        )
    return _answer_failure(exc, what, at, reason)


def _cluster_failure(exc: Exception, what: str, at: str, reason: str) -> FastAIAgentError:
    """:func:`redis_failure` for what only a Redis Cluster (or a cluster URL) says."""
    upper = reason.upper()
    errors = redis_lib.exceptions
    if isinstance(exc, errors.AskError) or upper.startswith(("MOVED", "ASK ")) or "NON LOCAL KEY" in upper:
        return StoreConfigError(
            f"{at} is a Redis Cluster node, and {what} was opened as a single server "
            f"({reason}): add ?cluster=true to the URL"
        )
    if "CLUSTER MODE IS NOT ENABLED" in upper:
        return StoreConfigError(
            f"{at} is not a Redis Cluster node, but the URL of {what} asks for one "
            f"({reason}): drop ?cluster=true from the URL"
        )
    if upper.startswith("CROSSSLOT"):
        return StoreCorruptError(
            f"a call of {what} spanned several hash slots ({at}: {reason}): a bug of "
            "fastaiagent's cluster layout; please report it"
        )
    return StoreUnavailableError(
        f"the Redis Cluster of {what} cannot serve the call ({at}: {reason}): retry once "
        "its slots are covered (a failover may be running)"
    )


def _answer_failure(exc: Exception, what: str, at: str, reason: str) -> FastAIAgentError:
    """:func:`redis_failure` for a server that answered, but not as asked."""
    errors = redis_lib.exceptions
    if isinstance(exc, errors.InvalidResponse):
        return StoreConfigError(
            f"the server for {what} does not answer as Redis does ({at}: {reason}): check "
            "that the URL's host and port are a Redis server's (redis:// for plain TCP, "
            "rediss:// for TLS)"
        )
    if reason.upper().startswith("WRONGTYPE"):
        return StoreCorruptError(
            f"a key of {what} holds another type ({at}: {reason}): another program writes "
            "under the store's prefix; give the store a prefix of its own, or delete the "
            "stray keys"
        )
    if isinstance(exc, errors.OutOfMemoryError) or reason.upper().startswith("OOM"):
        return StoreUnavailableError(
            f"Redis for {what} is out of memory ({at}: {reason}): raise its maxmemory or "
            "free keys, then retry"
        )
    if reason.upper().startswith("MISCONF"):
        return StoreUnavailableError(
            f"Redis for {what} refuses writes because it cannot save to disk ({at}: "
            f"{reason}): check the server's disk and log"
        )
    return StoreUnavailableError(
        f"Redis could not complete the call for {what} ({at}: {type(exc).__name__}: "
        f"{reason}): retry, or check the server's log"
    )


@contextmanager
def parsing(url: str) -> Iterator[None]:
    """redis-py's ValueError for a URL it cannot read (a port or an option value
    that is no number) as the library's InvalidValueError naming the URL."""
    try:
        yield
    except ValueError as exc:
        raise InvalidValueError(f"{redacted_url(url)}: {exc}") from None


def guarded_client(url: str, **options: Any) -> Any:
    """A ``redis.Redis`` for ``url`` whose connections consult the server's shared
    :class:`~fastaiagent.facts.outage.StoreHealth` before connecting: while the
    server is paused a call raises at once instead of waiting out a timeout
    (options in the URL's query, e.g. ``socket_connect_timeout``, win)."""
    with parsing(url):
        pool = redis_lib.ConnectionPool.from_url(url, **options)
    name = outage.server_name("Redis", url)
    pool.connection_class = _guarded_class(pool.connection_class, outage.health(name), name)
    client = redis_lib.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True  # as Redis.from_url: close() closes the pool
    return client


def guarded_cluster_class(base: type) -> type:
    """``base`` gated per node: each cluster node has its own health (named by its
    address), so one node that is down (a failover) pauses only its calls."""
    return _guarded_class(base, None, "")


def _guarded_class(base: type, shared: outage.StoreHealth | None, name: str) -> type:
    """``base`` (plain, TLS or unix-socket connection) whose connect is gated by
    ``shared`` (None: the health of the connection's own host and port); errors of
    the connect carry the server's name (see :data:`_LOCATION`). A refused or lost
    connection pauses the server; rejected credentials or something other than
    Redis at the address (:class:`~fastaiagent.errors.StoreConfigError`) do not:
    waiting will not fix them."""
    errors = redis_lib.exceptions
    failures = (errors.ConnectionError, errors.TimeoutError, errors.InvalidResponse)

    def connect_check_health(self: Any, *args: Any, **kwargs: Any) -> None:
        if self._sock:  # connected already: nothing to wait for
            return
        where = name or outage.server_name("Redis", f"redis://{self.host}:{self.port}")
        health = shared or outage.health(where)
        health.check(error=errors.ConnectionError)  # unavailable() words it
        try:
            base.connect_check_health(self, *args, **kwargs)  # type: ignore[attr-defined]
        except errors.RedisError as exc:
            setattr(exc, _LOCATION, where)
            # A configuration error (credentials, not Redis) is no outage: not paused.
            if isinstance(exc, failures) and not isinstance(redis_failure(exc, ""), StoreConfigError):
                health.failed(" ".join(str(exc).split()))
            raise
        health.succeeded()

    return type(f"Guarded{base.__name__}", (base,), {"connect_check_health": connect_check_health})
