"""Exceptions raised by LLM clients, one per failure a caller can act on."""

from __future__ import annotations

from fastaiagent.errors import FastAIAgentError


class LLMError(FastAIAgentError, RuntimeError):
    """Base class of every LLM failure. ``provider`` names who failed."""

    def __init__(self, message: str, *, provider: str = "", status_code: int | None = None):
        super().__init__(message)
        self.provider = provider
        self.status_code = status_code


class LLMAuthenticationError(LLMError):
    """The API key is missing, wrong or not allowed to use the model."""


class LLMRateLimitError(LLMError):
    """429 after the retries ran out. ``retry_after`` is the server's hint, in seconds."""

    def __init__(self, message: str, *, provider: str = "", retry_after: float | None = None):
        super().__init__(message, provider=provider, status_code=429)
        self.retry_after = retry_after


class LLMTimeoutError(LLMError):
    """The provider did not answer within the client's timeout."""


class LLMConnectionError(LLMError):
    """The provider could not be reached."""


class LLMServerError(LLMError):
    """The provider failed (5xx) after the retries ran out."""


class LLMBadRequestError(LLMError):
    """The provider refused the request (4xx other than auth and rate limits)."""
