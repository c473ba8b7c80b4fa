"""LLMClient: one front for the supported providers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from fastaiagent import _validate as check
from fastaiagent.errors import InvalidValueError
from fastaiagent.llm.base import BaseLLM, LLMResponse, StreamEvent, ToolSpec
from fastaiagent.llm.message import Message

PROVIDERS = ("openai", "anthropic", "ollama", "openai-compatible")


def _optional_text(name: str, value: Any) -> str | None:
    # "" is kept: it means "not set" (e.g. a key read from an unset variable).
    return None if value is None else check.text(name, value, allow_empty=True)


def _seconds(name: str, value: Any) -> float:
    seconds = check.positive_number(name, value)
    assert seconds is not None  # None is refused above (allow_none=False)
    return seconds


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
    provider SDK. ``temperature`` (>= 0) and ``max_tokens`` (>= 1) are sent
    only when set. Failures raise the :mod:`fastaiagent.llm.errors` classes;
    bad arguments raise InvalidTypeError / InvalidValueError here, before any call.
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
        self.provider = check.one_of("provider", provider, PROVIDERS)
        if isinstance(model, str) and not model.strip():
            raise InvalidValueError("LLMClient needs a model name, e.g. model='gpt-4.1'")
        self.model = check.text("model", model)
        self.api_key = _optional_text("api_key", api_key)
        self.base_url = _optional_text("base_url", base_url)
        if provider == "openai-compatible" and not base_url:
            raise InvalidValueError(
                "provider='openai-compatible' needs base_url=, e.g. 'http://localhost:8000/v1'"
            )
        self.timeout = _seconds("timeout", timeout)
        self.max_retries = check.integer("max_retries", max_retries, minimum=0)
        self.temperature = check.number("temperature", temperature, minimum=0.0, allow_none=True)
        self.max_tokens = check.positive_int("max_tokens", max_tokens, allow_none=True)
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
