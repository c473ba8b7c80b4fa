"""The LLM interface every model (real provider or test double) implements."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from fastaiagent.llm.message import Message, ToolCall


@runtime_checkable
class ProviderSettings(Protocol):
    """What a provider adapter reads of its client: the settings
    :class:`~fastaiagent.llm.client.LLMClient` has validated. The adapters
    depend on this, not on the client, which builds them."""

    provider: str
    model: str
    api_key: str | None
    base_url: str | None
    timeout: float
    max_retries: int
    temperature: float | None
    max_tokens: int | None


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a callable tool: name, description, JSON schema."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass
class Usage:
    """Token counts reported by the provider (0 when unknown)."""

    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class LLMResponse:
    """One model completion."""

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    model: str = ""
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)


@dataclass
class StreamEvent:
    """A streamed piece of a completion: a text delta, or the final response."""

    kind: Literal["text", "done"]
    text: str = ""
    response: LLMResponse | None = None


class BaseLLM:
    """Base class of every LLM. Subclasses implement :meth:`complete`.

    The async and streaming methods have working defaults: ``acomplete`` runs
    ``complete`` in a worker thread (so the event loop is never held), and the
    streams yield the whole reply as one delta. Providers override them with
    native implementations.
    """

    model: str = ""
    #: Whether the model can be offered tools. Callers that can do without
    #: (fact extraction asks for a ``record_facts`` call, else parses text)
    #: skip tools when a subclass sets this to False.
    supports_tools: bool = True

    def complete(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec] | None = None
    ) -> LLMResponse:
        raise NotImplementedError

    async def acomplete(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec] | None = None
    ) -> LLMResponse:
        return await asyncio.to_thread(self.complete, list(messages), tools=tools)

    def stream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec] | None = None
    ) -> Iterator[StreamEvent]:
        response = self.complete(messages, tools=tools)
        if response.content:
            yield StreamEvent("text", text=response.content)
        yield StreamEvent("done", response=response)

    async def astream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec] | None = None
    ) -> AsyncIterator[StreamEvent]:
        response = await self.acomplete(messages, tools=tools)
        if response.content:
            yield StreamEvent("text", text=response.content)
        yield StreamEvent("done", response=response)
