"""Provider adapters behind :class:`~fastaiagent.llm.client.LLMClient`.

Each adapter has ``complete``, ``acomplete``, ``stream`` and ``astream``
taking ``(messages, *, tools=None)``. The SDKs are imported when the first
adapter is built, i.e. on the client's first call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.llm.base import ProviderSettings

if TYPE_CHECKING:
    from fastaiagent.llm.providers.anthropic import AnthropicProvider
    from fastaiagent.llm.providers.openai import OpenAIChatProvider


def make_provider(client: ProviderSettings) -> OpenAIChatProvider | AnthropicProvider:
    """The adapter for ``client.provider``.

    Raises LLMAuthenticationError when openai/anthropic has no key (argument
    or environment variable), ImportError naming the extra when the SDK is
    missing, InvalidValueError for an unknown provider.
    """
    if not isinstance(client, ProviderSettings):
        raise InvalidTypeError(f"make_provider needs an LLMClient, got {type(client).__name__}")
    if client.provider == "anthropic":
        from fastaiagent.llm.providers.anthropic import AnthropicProvider

        return AnthropicProvider(client)
    if client.provider in ("openai", "ollama", "openai-compatible"):
        from fastaiagent.llm.providers.openai import OpenAIChatProvider

        return OpenAIChatProvider(client)
    raise InvalidValueError(f"no adapter for LLM provider {client.provider!r}")


__all__ = ["make_provider"]
