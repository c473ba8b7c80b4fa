"""LLMClient: one front for the supported providers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from fastaiagent.errors import InvalidValueError
from fastaiagent.llm.base import BaseLLM, LLMResponse, StreamEvent, ToolSpec
from fastaiagent.llm.message import Message

PROVIDERS = ("openai", "anthropic", "ollama", "openai-compatible")


class LLMClient(BaseLLM):
    """A chat model reached over the network.

    ``provider`` is ``"openai"``, ``"anthropic"``, ``"ollama"`` or
    ``"openai-compatible"`` (any server speaking the OpenAI chat API at
    ``base_url``). The provider SDK is imported on first use, so building a
    client needs no network and no key; a missing SDK raises ImportError
    naming the extra to install.

    ``api_key`` falls back to ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``; a
    missing key raises LLMAuthenticationError at the first call. Ollama and
    OpenAI-compatible servers need no key (Ollama defaults to
    ``http://localhost:11434/v1``). ``timeout`` (seconds, per attempt) and
    ``max_retries`` (429, 5xx, timeouts, connection errors) are handed to the
    provider SDK. Failures raise the :mod:`fastaiagent.llm.errors` classes.
    """

    def __init__(
        self,
        provider: str = "openai",
        model: str = "",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> None:
        if provider not in PROVIDERS:
            raise InvalidValueError(f"unknown LLM provider {provider!r}; expected one of {PROVIDERS}")
        if not model or not isinstance(model, str):
            raise InvalidValueError("LLMClient needs a model name, e.g. model='gpt-4.1'")
        if provider == "openai-compatible" and not base_url:
            raise InvalidValueError("provider='openai-compatible' needs base_url=")
        if timeout <= 0:
            raise InvalidValueError("timeout must be > 0 seconds")
        if max_retries < 0:
            raise InvalidValueError("max_retries must be >= 0")
        self.provider = provider
        self.model = model
        self.api_key = api_key
        self.base_url = base_url
        self.timeout = timeout
        self.max_retries = max_retries
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._backend: Any = None

    def __repr__(self) -> str:
        return f"LLMClient(provider={self.provider!r}, model={self.model!r})"

    @property
    def backend(self) -> Any:
        """The provider adapter, built on first use."""
        if self._backend is None:
            from fastaiagent.llm.providers import make_provider

            self._backend = make_provider(self)
        return self._backend

    def complete(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec] | None = None
    ) -> LLMResponse:
        return self.backend.complete(list(messages), tools=tools)

    async def acomplete(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec] | None = None
    ) -> LLMResponse:
        return await self.backend.acomplete(list(messages), tools=tools)

    def stream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec] | None = None
    ) -> Iterator[StreamEvent]:
        yield from self.backend.stream(list(messages), tools=tools)

    async def astream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSpec] | None = None
    ) -> AsyncIterator[StreamEvent]:
        async for event in self.backend.astream(list(messages), tools=tools):
            yield event

    def to_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": self.model}
