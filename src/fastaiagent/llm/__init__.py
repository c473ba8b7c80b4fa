"""LLM messages, the LLM interface and the provider client."""

from fastaiagent.llm.base import BaseLLM, LLMResponse, StreamEvent, ToolSpec, Usage
from fastaiagent.llm.client import LLMClient
from fastaiagent.llm.errors import (
    LLMAuthenticationError,
    LLMBadRequestError,
    LLMConnectionError,
    LLMError,
    LLMRateLimitError,
    LLMServerError,
    LLMTimeoutError,
)
from fastaiagent.llm.message import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

__all__ = [
    "AssistantMessage",
    "BaseLLM",
    "LLMAuthenticationError",
    "LLMBadRequestError",
    "LLMClient",
    "LLMConnectionError",
    "LLMError",
    "LLMRateLimitError",
    "LLMResponse",
    "LLMServerError",
    "LLMTimeoutError",
    "Message",
    "StreamEvent",
    "SystemMessage",
    "ToolCall",
    "ToolMessage",
    "ToolSpec",
    "Usage",
    "UserMessage",
]
