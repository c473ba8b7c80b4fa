"""Running the UI: the bind-address rule and the uvicorn server."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastaiagent import _serving
from fastaiagent.errors import InvalidValueError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve on a non-loopback address without a token.

    Facts and traces hold what users said; anyone who can reach the port
    could read them.
    """
    if not is_loopback(host) and not token:
        raise InvalidValueError(
            f"refusing to serve the UI on {host!r} without a token: anyone who can reach "
            "that address could read your facts and traces. Pass --token (or set "
            "FASTAIAGENT_UI_TOKEN), or bind 127.0.0.1."
        )
    if token is not None and len(token) < 8:
        raise InvalidValueError("the UI token must be at least 8 characters")


def serve(
    location: Any = "sqlite",
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    trace_db: str | Path | None = None,
    log_level: str = "warning",
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve the UI until interrupted (see :func:`fastaiagent.ui.create_app`).

    Everything that can be wrong is found before serving starts: an address
    that needs a token, a host or port that cannot be bound
    (InvalidValueError), a port in use (UsageError), stores that cannot be
    read (StoreUnavailableError). ``announce`` then receives the URL.
    """
    check_bind(host, token)
    serve_on(
        _serving.listen(host, port),
        location,
        token=token,
        trace_db=trace_db,
        log_level=log_level,
        announce=announce,
    )


def serve_on(
    sock: socket.socket,
    location: Any = "sqlite",
    *,
    token: str | None = None,
    trace_db: str | Path | None = None,
    log_level: str = "warning",
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve the UI on a listening socket (closed when serving ends or cannot start).

    The stores are read once first: StoreUnavailableError when one fails.
    ``announce`` receives the URL (with the real port when 0 was asked for).
    """
    from fastaiagent.ui.app import check_stores, create_app

    try:
        app = create_app(location, trace_db=trace_db, token=token)
        check_stores(app)
    except BaseException:
        sock.close()
        raise
    if announce is not None:
        announce(_serving.url(sock))
    _serving.run(app, sock, log_level=log_level)
