"""The connection to a plane (the central, curated memory service).

A :class:`PlaneConnection` says where a plane is and how to authenticate. Pass
one explicitly (``PlaneFactBlock(..., plane=conn)``,
``Memory(plane_agent_id=..., plane=conn)``), made with :func:`plane_connection`
or ``PlaneConnection(target=..., api_key=...)``; or, as a convenience,
``connect(api_key=..., target=...)`` makes one the process's default, which
readers given no connection use. Every reader shares one HTTP client per
process (connections reused, every read bounded by its connection's total
deadline) and one back-off registry, keyed by ``(plane target, agent_id)``, so
an outage seen by one reader pauses every reader of the same plane and agent.
"""

from __future__ import annotations

import functools
import os
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from fastaiagent import _validate as check
from fastaiagent.errors import FastAIAgentError, InvalidTypeError, InvalidValueError

DEFAULT_TIMEOUT = 5.0
MAX_TIMEOUT = 300.0  # seconds; a read that slow would stall every turn
MAX_BODY_BYTES = 4 * 1024 * 1024
ENV_API_KEY = "FASTAIAGENT_API_KEY"
ENV_TARGET = "FASTAIAGENT_TARGET"


class PlaneTimeout(httpx.TimeoutException, FastAIAgentError):
    """A plane read did not finish within its total deadline."""


@dataclass(frozen=True)
class PlaneConnection:
    """Where a plane is and how to authenticate, checked when made.

    ``target`` is the plane's http(s) URL, ``api_key`` the key it expects and
    ``timeout`` bounds each whole read, in seconds (0 < timeout <= 300). Making
    one sends nothing and changes no process state: pass it to the readers that
    should use it, or to :func:`connect` to make it the process's default.
    """

    target: str
    api_key: str
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        target = _check_target(check.text("target", self.target).strip())
        api_key = check.text("api_key", self.api_key).strip()
        timeout = check.number(
            "timeout", self.timeout, minimum=0, exclusive_minimum=True, maximum=MAX_TIMEOUT
        )
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "api_key", api_key)
        object.__setattr__(self, "timeout", float(timeout or 0))

    def __repr__(self) -> str:  # never print the key
        return f"PlaneConnection(target={self.target!r}, timeout={self.timeout})"

    @property
    def headers(self) -> dict[str, str]:
        from fastaiagent._version import __version__

        return {
            "Authorization": f"Bearer {self.api_key}",
            "Accept": "application/json",
            "User-Agent": f"fastaiagent/{__version__}",
        }


class _Process:
    """Per-process state: the connection, the HTTP client and the back-off registry."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.connection: PlaneConnection | None = None
        self.client: httpx.Client | None = None
        self.registry = BackoffRegistry()


# -- back-off -----------------------------------------------------------------

FETCH = "fetch"  # go ahead and read the plane
PROBE = "probe"  # a pause just ended: this caller alone retries
PAUSED = "paused"  # the plane is down: serve cached facts for the same question
DENIED = "denied"  # the plane refused this agent: inject nothing


@dataclass
class _PlaneHealth:
    kind: str = ""  # "" healthy, PAUSED (down) or DENIED
    reason: str = ""
    paused_until: float = 0.0
    probing: bool = False  # one turn is retrying after the pause ended
    logged_denial: str = ""


class BackoffRegistry:
    """Shared pauses per ``(target, agent_id)``.

    While a pause lasts, :meth:`gate` answers PAUSED or DENIED without any
    network read. When it ends, exactly one caller gets PROBE;
    the others keep answering as paused until the probe reports back.
    ``clock`` is monotonic seconds, ``wall_clock`` UNIX seconds (for
    HTTP-date Retry-After); both are injectable for tests.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.clock = clock
        self.wall_clock = wall_clock
        self._lock = threading.Lock()
        self._health: dict[tuple[str, str], _PlaneHealth] = {}

    def gate(self, key: tuple[str, str]) -> str:
        """FETCH, PROBE, PAUSED or DENIED for a reader of ``key`` right now."""
        with self._lock:
            health = self._health.get(key)
            if health is None or not health.kind:
                return FETCH
            if health.probing or self.clock() < health.paused_until:
                return health.kind
            health.probing = True
            return PROBE

    def remaining(self, key: tuple[str, str]) -> float:
        """Seconds left in the pause of ``key`` (0 when not paused)."""
        with self._lock:
            health = self._health.get(key)
            if health is None or not health.kind:
                return 0.0
            return max(0.0, health.paused_until - self.clock())

    def succeeded(self, key: tuple[str, str]) -> str:
        """Record a good read; returns the previous trouble ("" if there was none)."""
        with self._lock:
            health = self._health.pop(key, None)
        return health.kind if health is not None else ""

    def failed(self, key: tuple[str, str], pause: float, reason: str) -> bool:
        """Record an outage and pause ``key``; True when this starts the outage."""
        with self._lock:
            health = self._health.setdefault(key, _PlaneHealth())
            starts = health.kind != PAUSED
            health.kind, health.reason = PAUSED, reason
            health.paused_until = self.clock() + pause
            health.probing = False
        return starts

    def denied(self, key: tuple[str, str], pause: float, reason: str) -> bool:
        """Record a refusal (401/403/404); True the first time this reason is seen."""
        with self._lock:
            health = self._health.setdefault(key, _PlaneHealth())
            first = health.logged_denial != reason
            health.kind, health.reason, health.logged_denial = DENIED, reason, reason
            health.paused_until = self.clock() + pause
            health.probing = False
        return first

    def release(self, key: tuple[str, str]) -> None:
        """End a probe that reported nothing (it crashed), so a later turn can retry."""
        with self._lock:
            health = self._health.get(key)
            if health is not None:
                health.probing = False

    def clear(self) -> None:
        """Forget every pause (on connect/disconnect)."""
        with self._lock:
            self._health.clear()


_process = _Process()


def _after_fork() -> None:
    # The parent's sockets and locks are not ours to use: start afresh.
    global _process
    old = _process
    _process = _Process()
    _process.connection = old.connection
    _process.registry = BackoffRegistry(old.registry.clock, old.registry.wall_clock)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


# -- connection -----------------------------------------------------------------


def _check_target(target: str) -> str:
    if not target:
        raise InvalidValueError("target cannot be empty: the plane's URL, like https://plane.example.com")
    parts = urlsplit(target)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidValueError(f"target must be an http(s) URL like https://plane.example.com, got {target!r}")
    return target.rstrip("/")


def plane_connection(
    api_key: str | None = None,
    target: str | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> PlaneConnection:
    """A checked :class:`PlaneConnection`, not made the process's default.

    ``api_key`` and ``target`` default to the ``FASTAIAGENT_API_KEY`` and
    ``FASTAIAGENT_TARGET`` environment variables; ``timeout`` bounds each whole
    read, in seconds. Nothing is sent until a reader reads.
    """
    api_key = api_key if api_key is not None else os.environ.get(ENV_API_KEY)
    target = target if target is not None else os.environ.get(ENV_TARGET)
    # Missing (None or blank) is a setting left out: say where it can come from.
    if api_key is None or (isinstance(api_key, str) and not api_key.strip()):
        raise InvalidValueError(f"connect() needs an api_key (or set {ENV_API_KEY})")
    if target is None or (isinstance(target, str) and not target.strip()):
        raise InvalidValueError(f"connect() needs a target URL (or set {ENV_TARGET})")
    return PlaneConnection(target, api_key, timeout)


def connect(
    api_key: str | None = None,
    target: str | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
) -> PlaneConnection:
    """Make a plane the process's default connection (a convenience).

    The arguments are :func:`plane_connection`'s. Readers given no connection
    of their own (``PlaneFactBlock(plane=None)``, ``Memory(plane=None)``) use
    this one. Connecting again replaces it and clears every back-off. Nothing
    is sent until a reader reads.
    """
    connection = plane_connection(api_key, target, timeout=timeout)
    _switch(connection)
    return connection


def disconnect() -> None:
    """Forget the connection, close the HTTP client and clear every back-off."""
    _switch(None)


def _switch(connection: PlaneConnection | None) -> None:
    """Use ``connection`` from now on: a new HTTP client and no back-off carried over."""
    with _process.lock:
        _process.connection = connection
        old, _process.client = _process.client, None
    _process.registry.clear()
    if old is not None:
        old.close()


def connection() -> PlaneConnection | None:
    """The process's default connection (from :func:`connect`), or None."""
    return _process.connection


def resolve(explicit: PlaneConnection | None) -> PlaneConnection | None:
    """The connection a reader uses: its own, else the process's default (or None)."""
    return explicit if explicit is not None else _process.connection


def check_connection(value: object) -> PlaneConnection | None:
    """``value`` as a reader's own connection: None (use the default) or a PlaneConnection."""
    if value is None or isinstance(value, PlaneConnection):
        return value
    raise InvalidTypeError(
        "plane= must be a PlaneConnection (fastaiagent.plane.plane_connection(...)) or None "
        f"for the connect() default, got {type(value).__name__}"
    )


def is_connected() -> bool:
    return _process.connection is not None


def backoff() -> BackoffRegistry:
    """The process-wide back-off registry shared by every plane reader."""
    return _process.registry


@functools.lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    # Built once per process: loading the CA bundle costs more than a plane read.
    return ssl.create_default_context()


def _client() -> httpx.Client:
    # One pool for every connection: each read passes its own connection's timeout.
    with _process.lock:
        if _process.client is None:
            _process.client = httpx.Client(
                timeout=httpx.Timeout(DEFAULT_TIMEOUT, connect=min(DEFAULT_TIMEOUT, 3.0)),
                limits=httpx.Limits(max_connections=32, max_keepalive_connections=8),
                follow_redirects=False,
                verify=_tls_context(),
                trust_env=False,
            )
        return _process.client


@dataclass(frozen=True)
class PlaneResponse:
    """Status, headers and body of one plane read."""

    status_code: int
    headers: Mapping[str, str]
    body: bytes


def get(conn: PlaneConnection, path: str, params: Mapping[str, Any]) -> PlaneResponse:
    """GET ``path`` on the plane, bounded by ``conn.timeout`` in total.

    Raises ``httpx.TransportError`` (``PlaneTimeout`` for the deadline) when
    the plane cannot be reached or answers too slowly or too much.
    """
    deadline = time.monotonic() + conn.timeout
    timeout = httpx.Timeout(conn.timeout, connect=min(conn.timeout, 3.0))
    with _client().stream(
        "GET", conn.target + path, params=dict(params), headers=conn.headers, timeout=timeout
    ) as r:
        chunks: list[bytes] = []
        size = 0
        # A per-read timeout alone lets a trickling server hold a turn forever.
        for chunk in r.iter_bytes():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise httpx.ReadError(f"plane answer larger than {MAX_BODY_BYTES} bytes")
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise PlaneTimeout(f"plane read took longer than {conn.timeout} s")
        return PlaneResponse(r.status_code, r.headers, b"".join(chunks))
