"""A local HTTP server speaking enough of the OpenAI and Anthropic APIs for provider tests.

Tests script what the "model" says with :class:`Say` (text and/or tool calls),
:class:`Fail` (an HTTP error) or :class:`Hang` (no answer). The server renders
each reply in the wire format the request asked for: OpenAI chat completions
on ``/v1/chat/completions``, Anthropic messages on ``/v1/messages``, as JSON
or as server-sent events when the request has ``"stream": true``. Every
request is recorded (path, headers, JSON body) for assertions.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "fake-model"


@dataclass
class Call:
    """A tool call the fake model makes."""

    id: str
    name: str
    arguments: dict[str, Any]
    raw: str | None = None  # send this text instead of the JSON-encoded arguments

    def wire_arguments(self) -> str:
        return self.raw if self.raw is not None else json.dumps(self.arguments)


@dataclass
class Say:
    """A successful reply; ``text`` is streamed in ``pieces`` (default: word by word)."""

    text: str = ""
    calls: list[Call] = field(default_factory=list)
    pieces: list[str] | None = None
    # Streams only: stop after this many events and say nothing more...
    stall_after: int | None = None
    # ...or, after the text, send an in-stream error event with this message.
    stream_error: str | None = None

    def chunks(self) -> list[str]:
        if self.pieces is not None:
            return self.pieces
        words = self.text.split(" ")
        return [w if i == 0 else " " + w for i, w in enumerate(words)] if self.text else []


@dataclass
class Fail:
    """An HTTP error with a provider-shaped JSON body.

    ``retry-after-ms: 1`` is sent by default so the SDKs retry without waiting.
    """

    status: int
    message: str = "scripted failure"
    headers: dict[str, str] = field(default_factory=lambda: {"retry-after-ms": "1"})


@dataclass
class Hang:
    """Accept the request and say nothing for ``seconds``."""

    seconds: float = 5.0


Reply = Say | Fail | Hang


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def _split_json(text: str, size: int = 7) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


# -- OpenAI wire format ---------------------------------------------------------------


def _openai_call(call: Call) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.wire_arguments()},
    }


def openai_json(reply: Say) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
    if reply.calls:
        message["tool_calls"] = [_openai_call(c) for c in reply.calls]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def _openai_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def openai_events(reply: Say, include_usage: bool) -> list[tuple[str | None, str]]:
    chunks = [_openai_chunk({"role": "assistant", "content": ""})]
    chunks += [_openai_chunk({"content": piece}) for piece in reply.chunks()]
    for index, call in enumerate(reply.calls):
        head = {"index": index, "id": call.id, "type": "function"}
        head["function"] = {"name": call.name, "arguments": ""}
        chunks.append(_openai_chunk({"tool_calls": [head]}))
        for fragment in _split_json(call.wire_arguments()):
            delta = {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}
            chunks.append(_openai_chunk(delta))
    chunks.append(_openai_chunk({}, "tool_calls" if reply.calls else "stop"))
    if include_usage:
        usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        chunks.append({**_openai_chunk({}), "choices": [], "usage": usage})
    return [(None, json.dumps(c)) for c in chunks] + [(None, "[DONE]")]


def openai_error(fail: Fail) -> dict[str, Any]:
    return {"error": {"message": fail.message, "type": "fake_error", "param": None, "code": None}}


# -- Anthropic wire format ------------------------------------------------------------


def anthropic_json(reply: Say) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    content += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in reply.calls
    ]
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": "tool_use" if reply.calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 11, "output_tokens": 7},
    }


def anthropic_events(reply: Say) -> list[tuple[str | None, str]]:
    start = {**anthropic_json(Say()), "stop_reason": None}
    start["usage"] = {"input_tokens": 11, "output_tokens": 1}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    index = 0
    if reply.text:
        block = {"type": "text", "text": ""}
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        for piece in reply.chunks():
            delta = {"type": "text_delta", "text": piece}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
        index += 1
    for call in reply.calls:
        block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        for fragment in _split_json(call.wire_arguments()):
            delta = {"type": "input_json_delta", "partial_json": fragment}
            events.append({"type": "content_block_delta", "index": index, "delta": delta})
        events.append({"type": "content_block_stop", "index": index})
        index += 1
    stop = "tool_use" if reply.calls else "end_turn"
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 7},
        }
    )
    events.append({"type": "message_stop"})
    return [(e["type"], json.dumps(e)) for e in events]


def anthropic_error(fail: Fail) -> dict[str, Any]:
    kinds = {401: "authentication_error", 429: "rate_limit_error", 400: "invalid_request_error"}
    kind = kinds.get(fail.status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": fail.message}}


def _with_error(
    events: list[tuple[str | None, str]], reply: Say, anthropic: bool
) -> list[tuple[str | None, str]]:
    """Cut the stream after the text and end it with the provider's error event."""
    keep = 2 + len(reply.chunks()) + (2 if anthropic else 0)  # start (+ping, block start)
    message = reply.stream_error
    if anthropic:
        error = {"type": "error", "error": {"type": "overloaded_error", "message": message}}
        return [*events[:keep], ("error", json.dumps(error))]
    return [*events[: keep - 1], (None, json.dumps({"error": {"message": message}}))]


# -- the server -----------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 64  # concurrent async tests open many connections at once


class FakeLLMServer:
    """Scripted fake of the OpenAI and Anthropic HTTP APIs on 127.0.0.1 (random port).

    ``script(...)`` queues replies; when the queue is empty, ``default`` (a
    reply, or a function of the recorded request returning one) answers.
    ``valid_keys``, when set, makes any other key get a 401, as a real API does.
    """

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.default: Reply | Callable[[Recorded], Reply] = Say("default reply")
        self.valid_keys: set[str] | None = None
        self._queue: list[Reply] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next(self, request: Recorded) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._queue:
                return self._queue.pop(0)
        return self.default(request) if callable(self.default) else self.default

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {k.lower(): v for k, v in self.headers.items()}
                recorded = Recorded(self.path, headers, body)
                anthropic = self.path.rstrip("/").endswith("/messages")
                key = headers.get("x-api-key") or headers.get("authorization", "")
                key = key.removeprefix("Bearer ")
                if server.valid_keys is not None and key not in server.valid_keys:
                    with server._lock:
                        server.requests.append(recorded)
                    reply: Reply = Fail(401, "invalid api key", headers={})
                else:
                    reply = server._next(recorded)
                if isinstance(reply, Hang):
                    server._stopping.wait(reply.seconds)
                    return
                if isinstance(reply, Fail):
                    payload = anthropic_error(reply) if anthropic else openai_error(reply)
                    self._send_json(reply.status, payload, reply.headers)
                elif not body.get("stream"):
                    self._send_json(200, anthropic_json(reply) if anthropic else openai_json(reply))
                else:
                    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                    events = (
                        anthropic_events(reply)
                        if anthropic
                        else openai_events(reply, include_usage)
                    )
                    if reply.stream_error is not None:
                        events = _with_error(events, reply, anthropic)
                    self._send_sse(events[: reply.stall_after])
                    if reply.stall_after is not None:
                        server._stopping.wait(10)

            def _send_json(
                self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _send_sse(self, events: list[tuple[str | None, str]]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.end_headers()
                for name, data in events:
                    frame = (f"event: {name}\n" if name else "") + f"data: {data}\n\n"
                    self.wfile.write(frame.encode())
                    self.wfile.flush()

        return Handler
