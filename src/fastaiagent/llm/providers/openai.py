"""OpenAI chat-completions adapter; also serves Ollama and OpenAI-compatible servers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fastaiagent.llm.base import LLMResponse, ProviderSettings, ToolSpec, Usage
from fastaiagent.llm.message import Message, ToolCall
from fastaiagent.llm.providers._common import SDKProvider, parse_tool_arguments, resolve_api_key

OLLAMA_BASE_URL = "http://localhost:11434/v1"
# Servers that ignore the key still need a non-empty one: the SDK refuses to start without.
PLACEHOLDER_KEY = "not-needed"


def to_openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Our messages in chat-completions form (assistant tool calls, tool results)."""
    converted: list[dict[str, Any]] = []
    for message in messages:
        item: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.role == "assistant" and message.tool_calls:
            item["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": json.dumps(call.arguments, default=str),
                    },
                }
                for call in message.tool_calls
            ]
        elif message.role == "tool":
            item["tool_call_id"] = message.tool_call_id
            item["content"] = message.content or ""
        elif message.content is None:
            item["content"] = ""
        if message.name and message.role in ("user", "system"):
            item["name"] = message.name
        converted.append(item)
    return converted


def to_openai_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs as chat-completions ``function`` tools."""
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in tools
    ]


def _usage(raw: Any) -> Usage:
    if raw is None:
        return Usage()
    return Usage(
        input_tokens=int(getattr(raw, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(raw, "completion_tokens", 0) or 0),
    )


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class _StreamAssembler:
    """Builds the final response from chat-completion chunks (text and tool-call deltas)."""

    provider: str
    model: str
    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)

    def feed(self, chunk: Any) -> str:
        """Absorb one chunk; return its text delta ('' when none)."""
        self.model = getattr(chunk, "model", None) or self.model
        if getattr(chunk, "usage", None) is not None:
            self.usage = _usage(chunk.usage)
        delta_text = ""
        for choice in getattr(chunk, "choices", None) or []:
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None and delta.content:
                delta_text += delta.content
            for piece in (delta.tool_calls if delta is not None else None) or []:
                partial = self.calls.setdefault(piece.index, _PartialCall())
                partial.id = piece.id or partial.id
                if piece.function is not None:
                    partial.name = piece.function.name or partial.name
                    partial.arguments += piece.function.arguments or ""
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        if delta_text:
            self.text.append(delta_text)
        return delta_text

    def response(self) -> LLMResponse:
        calls = [
            ToolCall(
                id=p.id or f"call_{index}",
                name=p.name,
                arguments=parse_tool_arguments(self.provider, p.name, p.arguments),
            )
            for index, p in sorted(self.calls.items())
        ]
        return LLMResponse(
            content="".join(self.text) or None,
            tool_calls=calls,
            model=self.model,
            finish_reason=self.finish_reason,
            usage=self.usage,
        )


class OpenAIChatProvider(SDKProvider):
    """Talks to ``/chat/completions`` through the official ``openai`` SDK (also
    Ollama's and other OpenAI-compatible servers'). The SDK retries 429, 5xx,
    timeouts and connection errors.
    """

    sdk, sync_client, async_client = "openai", "OpenAI", "AsyncOpenAI"

    def _address(self, client: ProviderSettings) -> tuple[str, str | None]:
        if client.provider == "openai":
            return resolve_api_key(client, "OPENAI_API_KEY"), client.base_url
        # Never fall back to OPENAI_API_KEY here: it would be sent to a third-party server.
        return client.api_key or PLACEHOLDER_KEY, client.base_url or OLLAMA_BASE_URL

    def _endpoint(self, sdk_client: Any) -> Any:
        return sdk_client.chat.completions.create

    def _assembler(self) -> _StreamAssembler:
        return _StreamAssembler(self.provider, self._client.model)

    def _request(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec] | None, *, stream: bool
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "model": self._client.model,
            "messages": to_openai_messages(messages),
        }
        if tools:
            request["tools"] = to_openai_tools(tools)
        if self._client.temperature is not None:
            request["temperature"] = self._client.temperature
        if self._client.max_tokens is not None:
            # OpenAI replaced max_tokens (refused by its reasoning models); compatible
            # servers such as Ollama and vLLM know the original name.
            name = "max_completion_tokens" if self.provider == "openai" else "max_tokens"
            request[name] = self._client.max_tokens
        if stream:
            request["stream"] = True
            # Only the real OpenAI API and Ollama are known to accept stream_options;
            # other compatible servers may reject the unknown field.
            if self.provider in ("openai", "ollama"):
                request["stream_options"] = {"include_usage": True}
        return request

    def _response(self, reply: Any) -> LLMResponse:
        if not reply.choices:
            return LLMResponse(model=reply.model or self._client.model, usage=_usage(reply.usage))
        choice = reply.choices[0]
        message = choice.message
        calls = [
            ToolCall(
                id=call.id,
                name=call.function.name,
                arguments=parse_tool_arguments(
                    self.provider, call.function.name, call.function.arguments
                ),
            )
            for call in message.tool_calls or []
            if getattr(call, "function", None) is not None
        ]
        return LLMResponse(
            content=message.content or None,
            tool_calls=calls,
            model=reply.model or self._client.model,
            finish_reason=choice.finish_reason,
            usage=_usage(reply.usage),
        )
