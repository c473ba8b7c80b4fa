"""Serving an ASGI app (the UI, the plane): claim the address first, then run uvicorn on it.

Binding before anything is printed turns a bad ``--port``, an unknown
``--host`` or a port already taken into one clear error, instead of a
"serving on ..." line followed by uvicorn's own failure (or a hang).
"""

from __future__ import annotations

import errno
import socket
from typing import Any

from fastaiagent import _validate
from fastaiagent._optional import require
from fastaiagent.errors import InvalidValueError, UsageError

BACKLOG = 2048  # uvicorn's default


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port=0`` picks a free one).

    Raises :class:`~fastaiagent.errors.InvalidValueError` for a port outside
    0..65535 or a host this machine cannot bind, and
    :class:`~fastaiagent.errors.UsageError` when the port is taken or needs
    privileges.
    """
    port = _validate.port("port", port)
    host = _validate.text("host", host)
    name = host.strip("[]")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            name, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise InvalidValueError(
            f"cannot resolve host {host!r}: pass --host with an address of this machine (e.g. 127.0.0.1)"
        ) from exc
    sock = socket.socket(family, kind, proto)
    try:
        # Lets a restart reuse a port in TIME_WAIT; a live listener still refuses the bind.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)  # claim it now, so the port cannot be taken before uvicorn starts
    except OSError as exc:
        sock.close()
        raise _bind_error(host, port, exc) from exc
    return sock


def _bind_error(host: str, port: int, exc: OSError) -> Exception:
    if exc.errno == errno.EADDRINUSE:
        return UsageError(
            f"port {port} on {host} is already in use: stop the other server or pass --port "
            "with a free port"
        )
    if exc.errno == errno.EACCES:
        return UsageError(f"no permission to listen on port {port}: pass --port with a port above 1023")
    if exc.errno == errno.EADDRNOTAVAIL:
        return InvalidValueError(
            f"{host!r} is not an address of this machine: pass --host 127.0.0.1 (or an address it has)"
        )
    return UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}")


def url(sock: socket.socket) -> str:
    """``http://host:port`` of a listening socket (the real port when 0 was asked for)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def run(app: Any, sock: socket.socket, *, log_level: str = "warning") -> None:
    """Serve ``app`` on ``sock`` with uvicorn until interrupted; the socket is closed after."""
    uvicorn = require("uvicorn", "ui")
    try:
        uvicorn.Server(uvicorn.Config(app, log_level=log_level)).run(sockets=[sock])
    finally:
        sock.close()
