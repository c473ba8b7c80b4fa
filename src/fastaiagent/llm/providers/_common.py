"""Pieces shared by the provider adapters: keys, SDK error mapping, per-loop clients."""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from fastaiagent._io import decode_json
from fastaiagent.llm.base import ProviderSettings
from fastaiagent.llm.errors import (
    LLMAuthenticationError,
    LLMBadRequestError,
    LLMConnectionError,
    LLMError,
    LLMRateLimitError,
    LLMServerError,
    LLMTimeoutError,
)

T = TypeVar("T")


def resolve_api_key(client: ProviderSettings, env_var: str) -> str:
    """The client's key, else ``env_var``; a clear LLMAuthenticationError when neither is set."""
    key = client.api_key or os.environ.get(env_var)
    if not key:
        raise LLMAuthenticationError(
            f"{client.provider}: no API key. Pass LLMClient(api_key=...) or set {env_var}.",
            provider=client.provider,
        )
    return key


def parse_tool_arguments(provider: str, name: str, raw: str | None) -> dict[str, Any]:
    """Decode a tool call's JSON arguments; an empty string means no arguments."""
    if raw is None or not raw.strip():
        return {}
    try:
        value = decode_json(raw)
    except json.JSONDecodeError as exc:
        raise LLMError(
            f"{provider}: the model called tool {name!r} with arguments that are not valid "
            f"JSON ({exc.msg}): {raw[:200]!r}",
            provider=provider,
        ) from exc
    if not isinstance(value, dict):
        raise LLMError(
            f"{provider}: the model called tool {name!r} with arguments that are not a JSON "
            f"object: {raw[:200]!r}",
            provider=provider,
        )
    return value


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """The server's wait hint: ``retry-after-ms``, else ``retry-after`` (seconds or HTTP date)."""
    if not headers:
        return None
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    if parsed is None:
        return None
    return max(email.utils.mktime_tz(parsed) - time.time(), 0.0)


def _server_message(exc: Any) -> str:
    """The human part of an error body: ``error.message`` when the server sent JSON."""
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str) and inner:
            return inner
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return str(getattr(exc, "message", "") or exc)


def _is_httpx(exc: BaseException, class_name: str) -> bool:
    # Errors raised while reading a stream can escape the SDK unwrapped; they come
    # from httpx (or httpx2, depending on the SDK release), so match by name.
    return any(
        cls.__name__ == class_name and cls.__module__.split(".")[0].startswith("httpx")
        for cls in type(exc).__mro__
    )


def _timed_out(exc: BaseException, sdk: Any) -> bool:
    # Some SDK releases wrap a read timeout during streaming in a plain
    # APIConnectionError; the timeout is then found down the cause chain.
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, sdk.APITimeoutError) or _is_httpx(current, "TimeoutException"):
            return True
        current = current.__cause__
    return False


def translate_error(exc: BaseException, sdk: Any, client: ProviderSettings) -> BaseException:
    """Map an SDK (or httpx) exception to the matching :mod:`fastaiagent.llm.errors` class.

    Anything unrecognised is returned unchanged so real bugs are not disguised.
    """
    provider = client.provider
    n = client.max_retries
    retries = f"after {n} retr{'y' if n == 1 else 'ies'}" if n else "no retries"
    if _timed_out(exc, sdk):
        return LLMTimeoutError(
            f"{provider}: no answer within the {client.timeout:g}s timeout ({retries})",
            provider=provider,
        )
    if isinstance(exc, sdk.APIConnectionError) or _is_httpx(exc, "TransportError"):
        where = client.base_url or "its default endpoint"
        cause = exc.__cause__ or exc
        return LLMConnectionError(
            f"{provider}: could not connect to {where} ({retries}): {cause}",
            provider=provider,
        )
    if not isinstance(exc, sdk.APIStatusError):
        if isinstance(exc, sdk.APIError):
            # An error reported inside a stream, or a response the SDK could not read.
            return LLMServerError(
                f"{provider}: error during the response: {_server_message(exc)}",
                provider=provider,
            )
        return exc
    return _status_error(exc, client, retries)


def _status_error(exc: Any, client: ProviderSettings, retries: str) -> LLMError:
    """The error for an HTTP status the provider answered with."""
    provider = client.provider
    status = int(exc.status_code)
    detail = _server_message(exc)
    if status in (401, 403):
        return LLMAuthenticationError(
            f"{provider}: HTTP {status}, the API key was refused or may not use model "
            f"{client.model!r}: {detail}",
            provider=provider,
            status_code=status,
        )
    if status == 429:
        headers = getattr(getattr(exc, "response", None), "headers", None)
        wait = retry_after_seconds(headers)
        hint = f"; the server asks to retry after {wait:g}s" if wait is not None else ""
        return LLMRateLimitError(
            f"{provider}: HTTP 429, rate limited {retries}{hint}: {detail}",
            provider=provider,
            retry_after=wait,
        )
    if status >= 500:
        return LLMServerError(
            f"{provider}: HTTP {status}, server error {retries}: {detail}",
            provider=provider,
            status_code=status,
        )
    if status >= 400:
        return LLMBadRequestError(
            f"{provider}: HTTP {status}, request refused: {detail}",
            provider=provider,
            status_code=status,
        )
    # A status-carrying error without an error status: e.g. an "error" event inside
    # a 200 stream (Anthropic's overloaded_error mid-stream).
    return LLMServerError(f"{provider}: error during the response: {detail}", provider=provider)


@contextmanager
def sdk_errors(sdk: Any, client: ProviderSettings) -> Iterator[None]:
    """Re-raise SDK failures inside the block as :mod:`fastaiagent.llm.errors` exceptions."""
    try:
        yield
    except Exception as exc:
        mapped = translate_error(exc, sdk, client)
        if mapped is exc:
            raise
        raise mapped from exc


class PerLoop(Generic[T]):
    """One async SDK client per event loop.

    An async HTTP client's pooled connections belong to the loop that opened
    them; reusing the client from another loop (e.g. successive
    ``asyncio.run`` calls) fails, so each loop gets its own client.
    """

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._factory()
            self._clients[loop] = client
        return client
