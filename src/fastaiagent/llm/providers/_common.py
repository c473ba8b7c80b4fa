"""Pieces shared by the provider adapters: keys, SDK error mapping, per-loop clients,
and :class:`SDKProvider`, the calls every adapter makes through its SDK."""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from fastaiagent._io import decode_json
from fastaiagent._optional import require
from fastaiagent.llm import errors
from fastaiagent.llm.base import LLMResponse, ProviderSettings, StreamEvent, ToolSpec
from fastaiagent.llm.message import Message

T = TypeVar("T")


def resolve_api_key(client: ProviderSettings, env_var: str) -> str:
    """The client's key, else ``env_var``; a clear LLMAuthenticationError when neither is set."""
    key = client.api_key or os.environ.get(env_var)
    if not key:
        raise errors.LLMAuthenticationError(
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
        raise errors.LLMError(
            f"{provider}: the model called tool {name!r} with arguments that are not valid "
            f"JSON ({exc.msg}): {raw[:200]!r}",
            provider=provider,
        ) from exc
    if not isinstance(value, dict):
        raise errors.LLMError(
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
        return errors.LLMTimeoutError(
            f"{provider}: no answer within the {client.timeout:g}s timeout ({retries})",
            provider=provider,
        )
    if isinstance(exc, sdk.APIConnectionError) or _is_httpx(exc, "TransportError"):
        where = client.base_url or "its default endpoint"
        cause = exc.__cause__ or exc
        return errors.LLMConnectionError(
            f"{provider}: could not connect to {where} ({retries}): {cause}",
            provider=provider,
        )
    if not isinstance(exc, sdk.APIStatusError):
        if isinstance(exc, sdk.APIError):
            # An error reported inside a stream, or a response the SDK could not read.
            return errors.LLMServerError(
                f"{provider}: error during the response: {_server_message(exc)}",
                provider=provider,
            )
        return exc
    return _status_error(exc, client, retries)


def _status_error(exc: Any, client: ProviderSettings, retries: str) -> errors.LLMError:
    """The error for an HTTP status the provider answered with."""
    provider = client.provider
    status = int(exc.status_code)
    detail = _server_message(exc)
    if status in (401, 403):
        return errors.LLMAuthenticationError(
            f"{provider}: HTTP {status}, the API key was refused or may not use model "
            f"{client.model!r}: {detail}",
            provider=provider,
            status_code=status,
        )
    if status == 429:
        headers = getattr(getattr(exc, "response", None), "headers", None)
        wait = retry_after_seconds(headers)
        hint = f"; the server asks to retry after {wait:g}s" if wait is not None else ""
        return errors.LLMRateLimitError(
            f"{provider}: HTTP 429, rate limited {retries}{hint}: {detail}",
            provider=provider,
            retry_after=wait,
        )
    if status >= 500:
        return errors.LLMServerError(
            f"{provider}: HTTP {status}, server error {retries}: {detail}",
            provider=provider,
            status_code=status,
        )
    if status >= 400:
        return errors.LLMBadRequestError(
            f"{provider}: HTTP {status}, request refused: {detail}",
            provider=provider,
            status_code=status,
        )
    # A status-carrying error without an error status: e.g. an "error" event inside
    # a 200 stream (Anthropic's overloaded_error mid-stream).
    return errors.LLMServerError(
        f"{provider}: error during the response: {detail}", provider=provider
    )


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


class StreamAssembler(Protocol):
    """Builds the final response of a stream from the SDK's events, one at a time."""

    def feed(self, event: Any) -> str:
        """Absorb one event; return its text delta ('' when none)."""
        ...

    def response(self) -> LLMResponse:
        """The whole response, once the stream has ended."""
        ...


class SDKProvider:
    """An adapter on a provider's official SDK: its clients and the four calls.

    A subclass names the SDK module (``sdk``, also the extra that installs it)
    and its client classes, and says where requests go (:meth:`_address`),
    which SDK method sends one (:meth:`_endpoint`), how a request is built
    (:meth:`_request`), how a reply is read (:meth:`_response`) and how a
    stream is assembled (:meth:`_assembler`). Retries and the timeout are the
    SDK's own, configured from the LLMClient; failures surface as
    :mod:`fastaiagent.llm.errors` exceptions.
    """

    sdk: ClassVar[str]
    sync_client: ClassVar[str]
    async_client: ClassVar[str]

    def __init__(self, client: ProviderSettings) -> None:
        self._sdk = require(self.sdk, self.sdk)
        self._client = client
        self.provider = client.provider
        api_key, base_url = self._address(client)
        options: dict[str, Any] = {
            "api_key": api_key,
            "base_url": base_url,
            "timeout": client.timeout,
            "max_retries": client.max_retries,
        }
        self._sync = getattr(self._sdk, self.sync_client)(**options)
        self._async = PerLoop(lambda: getattr(self._sdk, self.async_client)(**options))

    def _address(self, client: ProviderSettings) -> tuple[str, str | None]:
        """The API key and base URL (None: the SDK's default) the clients use."""
        raise NotImplementedError

    def _endpoint(self, sdk_client: Any) -> Any:
        """The SDK method that sends a request, on ``sdk_client`` (sync or async)."""
        raise NotImplementedError

    def _request(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec] | None, *, stream: bool
    ) -> dict[str, Any]:
        raise NotImplementedError

    def _response(self, reply: Any) -> LLMResponse:
        raise NotImplementedError

    def _assembler(self) -> StreamAssembler:
        raise NotImplementedError

    def complete(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec] | None = None
    ) -> LLMResponse:
        """One completion."""
        with sdk_errors(self._sdk, self._client):
            reply = self._endpoint(self._sync)(**self._request(messages, tools, stream=False))
        return self._response(reply)

    async def acomplete(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec] | None = None
    ) -> LLMResponse:
        """One completion, without blocking the event loop."""
        request = self._request(messages, tools, stream=False)
        with sdk_errors(self._sdk, self._client):
            reply = await self._endpoint(self._async.get())(**request)
        return self._response(reply)

    def stream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec] | None = None
    ) -> Iterator[StreamEvent]:
        """Text deltas as they arrive, then ``done`` with the assembled response."""
        assembler = self._assembler()
        request = self._request(messages, tools, stream=True)
        with sdk_errors(self._sdk, self._client), self._endpoint(self._sync)(**request) as events:
            for event in events:
                text = assembler.feed(event)
                if text:
                    yield StreamEvent("text", text=text)
        yield StreamEvent("done", response=assembler.response())

    async def astream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec] | None = None
    ) -> AsyncIterator[StreamEvent]:
        """Async form of :meth:`stream`."""
        assembler = self._assembler()
        request = self._request(messages, tools, stream=True)
        with sdk_errors(self._sdk, self._client):
            events = await self._endpoint(self._async.get())(**request)
            async with events:
                async for event in events:
                    text = assembler.feed(event)
                    if text:
                        yield StreamEvent("text", text=text)
        yield StreamEvent("done", response=assembler.response())
