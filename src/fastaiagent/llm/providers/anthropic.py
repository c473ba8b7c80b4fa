"""Anthropic messages-API adapter (official ``anthropic`` SDK)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fastaiagent.llm.base import LLMResponse, ProviderSettings, ToolSpec, Usage
from fastaiagent.llm.message import Message, ToolCall
from fastaiagent.llm.providers._common import SDKProvider, parse_tool_arguments, resolve_api_key

# The messages API requires max_tokens; used when the LLMClient leaves it unset.
DEFAULT_MAX_TOKENS = 4096

# Anthropic's stop reasons in the vocabulary the rest of the library uses.
_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
}


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": message.content or "",
            }
        ]
    blocks: list[dict[str, Any]] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls if message.role == "assistant" else []:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        )
    return blocks


def to_anthropic_messages(messages: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """Split out the system text and convert the rest to content blocks.

    Tool results travel as ``user`` turns, and the API wants roles to
    alternate, so consecutive turns of the same role are merged (this is also
    how several tool results answering one assistant turn must be sent).
    """
    system = [m.content for m in messages if m.role == "system" and m.content]
    converted: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if converted and converted[-1]["role"] == role:
            converted[-1]["content"].extend(blocks)
        else:
            converted.append({"role": role, "content": blocks})
    return ("\n\n".join(system) or None), converted


def to_anthropic_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs as messages-API tools (the schema goes in ``input_schema``)."""
    return [
        {"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools
    ]


def _finish_reason(raw: str | None) -> str | None:
    return _FINISH_REASONS.get(raw, raw) if raw else None


@dataclass
class _Block:
    kind: str
    text: str = ""
    id: str = ""
    name: str = ""
    json: str = ""


@dataclass
class _StreamAssembler:
    """Builds the final response from the raw server-sent events of a message."""

    provider: str
    model: str
    blocks: dict[int, _Block] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)

    def feed(self, event: Any) -> str:
        """Absorb one event; return its text delta ('' when none)."""
        kind = getattr(event, "type", "")
        if kind == "message_start":
            self.model = event.message.model or self.model
            usage = getattr(event.message, "usage", None)
            if usage is not None:
                self.usage.input_tokens = int(getattr(usage, "input_tokens", 0) or 0)
                self.usage.output_tokens = int(getattr(usage, "output_tokens", 0) or 0)
        elif kind == "content_block_start":
            block = event.content_block
            self.blocks[event.index] = _Block(
                kind=block.type,
                text=getattr(block, "text", "") or "",
                id=getattr(block, "id", "") or "",
                name=getattr(block, "name", "") or "",
            )
        elif kind == "content_block_delta":
            block = self.blocks.setdefault(event.index, _Block(kind="text"))
            delta = event.delta
            if delta.type == "text_delta":
                block.text += delta.text
                return str(delta.text)
            if delta.type == "input_json_delta":
                block.json += delta.partial_json
        elif kind == "message_delta":
            self.finish_reason = _finish_reason(getattr(event.delta, "stop_reason", None))
            usage = getattr(event, "usage", None)
            if usage is not None and getattr(usage, "output_tokens", None) is not None:
                self.usage.output_tokens = int(usage.output_tokens)
        return ""

    def response(self) -> LLMResponse:
        ordered = [block for _, block in sorted(self.blocks.items())]
        text = "".join(b.text for b in ordered if b.kind == "text")
        calls = [
            ToolCall(
                id=b.id, name=b.name, arguments=parse_tool_arguments(self.provider, b.name, b.json)
            )
            for b in ordered
            if b.kind == "tool_use"
        ]
        return LLMResponse(
            content=text or None,
            tool_calls=calls,
            model=self.model,
            finish_reason=self.finish_reason,
            usage=self.usage,
        )


class AnthropicProvider(SDKProvider):
    """Talks to ``/v1/messages`` through the official ``anthropic`` SDK.

    System messages are joined into the ``system`` parameter; tool calls and
    results travel as ``tool_use`` / ``tool_result`` blocks.
    """

    sdk, sync_client, async_client = "anthropic", "Anthropic", "AsyncAnthropic"

    def _address(self, client: ProviderSettings) -> tuple[str, str | None]:
        return resolve_api_key(client, "ANTHROPIC_API_KEY"), client.base_url

    def _endpoint(self, sdk_client: Any) -> Any:
        return sdk_client.messages.create

    def _assembler(self) -> _StreamAssembler:
        return _StreamAssembler(self.provider, self._client.model)

    def _request(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec] | None, *, stream: bool
    ) -> dict[str, Any]:
        system, converted = to_anthropic_messages(messages)
        request: dict[str, Any] = {
            "model": self._client.model,
            "messages": converted,
            "max_tokens": self._client.max_tokens or DEFAULT_MAX_TOKENS,
        }
        if system:
            request["system"] = system
        if tools:
            request["tools"] = to_anthropic_tools(tools)
        if self._client.temperature is not None:
            # Recent SDK releases dropped the typed ``temperature`` argument; the
            # request body field still carries it on every release.
            request["extra_body"] = {"temperature": self._client.temperature}
        if stream:
            request["stream"] = True
        return request

    def _response(self, reply: Any) -> LLMResponse:
        text: list[str] = []
        calls: list[ToolCall] = []
        for block in reply.content or []:
            if block.type == "text":
                text.append(block.text)
            elif block.type == "tool_use":
                arguments = block.input if isinstance(block.input, dict) else {}
                calls.append(ToolCall(id=block.id, name=block.name, arguments=dict(arguments)))
        usage = getattr(reply, "usage", None)
        return LLMResponse(
            content="".join(text) or None,
            tool_calls=calls,
            model=reply.model or self._client.model,
            finish_reason=_finish_reason(reply.stop_reason),
            usage=Usage(
                input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
                output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
            ),
        )
