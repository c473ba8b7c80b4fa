"""What every post to the UI passes before a route reads its form.

:class:`FormGuard` is plain ASGI middleware (no web framework needed here). A
request that is not GET, HEAD or OPTIONS is refused:

- with 403 when its ``Origin`` (or, without one, its ``Referer``) names a host
  other than the request's own ``Host``: a page of another site (or an opaque
  ``Origin: null``) cannot post to the UI, whatever it guessed of the CSRF value;
- with 413, its body unread, when ``Content-Length`` is over the limit, and with
  413 as soon as a body sent without a length (chunked) passes the limit: the
  route is never handed more than ``limit`` bytes.

A post without ``Origin`` and ``Referer`` (curl, a script) passes to the CSRF
check of its route.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from fastaiagent.errors import FastAIAgentError

MAX_FORM_BYTES = 64 * 1024
"""The largest body a post may have: the UI's forms hold a few short fields."""

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_PORTS = {"http": 80, "https": 443}
FOREIGN_ORIGIN = (
    "This form did not come from this UI (it was sent from another site), so nothing was changed."
)

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]
# (status, message) -> the page to answer with, itself an ASGI app.
Refusal = Callable[[int, str], ASGIApp]


class ClientGone(FastAIAgentError, ConnectionError):
    """The client disconnected before its body was complete: nothing to answer."""


def header(scope: MutableMapping[str, Any], name: str) -> str:
    """The first value of header ``name`` (lower case), or ""."""
    wanted = name.encode("latin-1")
    for key, value in scope.get("headers", ()):
        if key.lower() == wanted:
            return bytes(value).decode("latin-1")
    return ""


def _authority(scheme: str, netloc: str) -> tuple[str, int] | None:
    """(host, port) of ``netloc`` with the scheme's default port filled in; None if malformed."""
    try:
        parts = urlsplit(f"//{netloc}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.hostname.lower(), port if port is not None else DEFAULT_PORTS.get(scheme, 0)


def foreign_origin(origin: str, host: str) -> bool:
    """Whether ``origin`` (an ``Origin`` or ``Referer`` value) names another host than
    ``host`` (the ``Host`` header). ``null`` and anything but an http(s) URL are foreign."""
    parts = urlsplit(origin.strip())
    if parts.scheme not in DEFAULT_PORTS or not parts.netloc:
        return True
    theirs = _authority(parts.scheme, parts.netloc.rpartition("@")[2])
    return theirs is None or theirs != _authority(parts.scheme, host.strip())


def refusal(scope: MutableMapping[str, Any], limit: int) -> tuple[int, str] | None:
    """Why a post is refused from its headers alone, as (status, message); None when it may be read."""
    source = header(scope, "origin") or header(scope, "referer")
    if source and foreign_origin(source, header(scope, "host")):
        return 403, FOREIGN_ORIGIN
    length = header(scope, "content-length").strip()
    if not length:
        return None
    if not length.isdigit():
        return 400, f"Content-Length must be a number of bytes, got {length[:40]!r}."
    if int(length) > limit:
        return 413, too_large(limit)
    return None


def too_large(limit: int) -> str:
    return f"This form is too large: a form of this UI is at most {limit // 1024} KiB."


async def read_at_most(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None as soon as it passes ``limit`` bytes (the rest is
    never read). Raises :class:`ClientGone` when the client disconnects first."""
    chunks: list[bytes] = []
    size, more = 0, True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = bytes(message.get("body", b""))
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        more = bool(message.get("more_body", False))
    return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands over ``body`` whole once, then the client's own messages."""
    delivered = False

    async def receive_again() -> Message:
        nonlocal delivered
        if delivered:
            return await receive()
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive_again


class FormGuard:
    """ASGI middleware: refuses a post from another origin (403) or with a body over
    ``limit`` bytes (413) before the app reads any of it (see the module)."""

    def __init__(self, app: ASGIApp, refuse: Refusal, limit: int = MAX_FORM_BYTES) -> None:
        self.app = app
        self.refuse = refuse
        self.limit = limit

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method", "GET") in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        problem = refusal(scope, self.limit)
        body = b""
        if problem is None:
            try:
                read = await read_at_most(receive, self.limit)
            except ClientGone:
                return
            if read is None:
                problem = (413, too_large(self.limit))
            else:
                body = read
        if problem is not None:
            await self.refuse(*problem)(scope, receive, send)
            return
        await self.app(scope, replay(body, receive), send)
