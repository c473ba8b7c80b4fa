"""Bearer tokens for the HTTP transport: which user a request acts for.

A token maps to one user. Every request must carry ``Authorization: Bearer
<token>``; the user is read from the token on each request (never from a tool
argument or the MCP session), so a client that learns another client's
session id still acts only for its own token's user.

Tokens are compared as SHA-256 digests with :func:`hmac.compare_digest`
against every configured token, so the time taken does not depend on how much
of a guess matches or on which token matched.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fastaiagent._io import decode_json
from fastaiagent._validate import optional_id
from fastaiagent.errors import InvalidValueError, MissingFileError

MIN_TOKEN_CHARS = 16
USER_SCOPE_KEY = "fastaiagent.mcp.user"  # where the ASGI scope carries the token's user
TOKEN_HINT = "make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class TokenMap:
    """Bearer tokens and the user each acts for."""

    def __init__(self, tokens: Mapping[str, str] | None = None) -> None:
        self._entries: list[tuple[bytes, str]] = []
        for token, user in (tokens or {}).items():
            self.add(token, user)

    def add(self, token: str, user: str) -> None:
        """Map ``token`` to ``user`` (at least 16 characters; a token names one user)."""
        if not isinstance(token, str) or len(token.strip()) < MIN_TOKEN_CHARS:
            raise InvalidValueError(
                f"a token must be at least {MIN_TOKEN_CHARS} characters; {TOKEN_HINT}"
            )
        if optional_id("the token's user", user) is None:
            raise InvalidValueError("a token needs a user: pass TOKEN=USER")
        digest = _digest(token)
        if any(hmac.compare_digest(digest, known) for known, _ in self._entries):
            raise InvalidValueError("the same token is given twice; each token names one user")
        self._entries.append((digest, user))

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def users(self) -> list[str]:
        """The users the tokens act for."""
        return sorted({user for _, user in self._entries})

    def user_for(self, token: str) -> str | None:
        """The user of ``token``, or None; every entry is compared, matched or not."""
        digest = _digest(token)
        found: str | None = None
        for known, user in self._entries:
            if hmac.compare_digest(digest, known):
                found = user
        return found

    def user_of_header(self, authorization: str | None) -> str | None:
        """The user of an ``Authorization: Bearer <token>`` header value, or None."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self.user_for(token.strip())


def parse_token_specs(specs: Iterable[str], into: TokenMap | None = None) -> TokenMap:
    """A TokenMap from ``TOKEN=USER`` strings (the ``--token`` option, the env variable)."""
    tokens = into if into is not None else TokenMap()
    for spec in specs:
        token, sep, user = spec.rpartition("=")
        if not sep or not token:
            raise InvalidValueError(f"a token must be given as TOKEN=USER; {TOKEN_HINT}")
        tokens.add(token, user)
    return tokens


def load_tokens_file(path: str | Path, into: TokenMap | None = None) -> TokenMap:
    """Read tokens from a JSON object ``{"TOKEN": "USER", ...}`` or lines of ``TOKEN=USER``.

    Blank lines and lines starting with ``#`` are skipped in the line format.
    """
    file = Path(path)
    try:
        raw = file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise MissingFileError(
            f"no tokens file at {str(file)!r}: pass --tokens-file with an existing file"
        ) from exc
    if raw.lstrip().startswith("{"):
        try:
            data: Any = decode_json(raw)
        except json.JSONDecodeError as exc:
            raise InvalidValueError(
                f"the tokens file {str(file)!r} is not valid JSON: {exc.msg}"
            ) from exc
        if not all(isinstance(key, str) and isinstance(value, str) for key, value in data.items()):
            raise InvalidValueError(
                f"the tokens file {str(file)!r} must map token strings to user strings"
            )
        tokens = into if into is not None else TokenMap()
        for token, user in data.items():
            tokens.add(token, user)
        return tokens
    lines = [line.strip() for line in raw.splitlines()]
    return parse_token_specs([line for line in lines if line and not line.startswith("#")], into)


class BearerAuth:
    """ASGI middleware: answer 401 unless the request carries a known bearer token.

    The token's user is put in the request's scope under :data:`USER_SCOPE_KEY`
    for the tools to read. Lifespan and other non-HTTP scopes pass through.
    """

    def __init__(self, app: Any, tokens: TokenMap) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        header = None
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        user = self.tokens.user_of_header(header)
        if user is None:
            await _unauthorized(send)
            return
        scope[USER_SCOPE_KEY] = user
        await self.app(scope, receive, send)


async def _unauthorized(send: Any) -> None:
    body = json.dumps(
        {"error": "unauthorized", "error_description": "send Authorization: Bearer <token>"}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="fastaiagent-mcp"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
