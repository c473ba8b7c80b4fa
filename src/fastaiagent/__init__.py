"""fastaiagent: agents that remember, per user and across sessions."""

from fastaiagent._version import __version__
from fastaiagent.agent import (
    Agent,
    AgentMemory,
    AgentResult,
    ComposableMemory,
    MemoryBlock,
    RunContext,
    StaticBlock,
)
from fastaiagent.agent.memory import Memory
from fastaiagent.errors import FastAIAgentError
from fastaiagent.llm import LLMClient
from fastaiagent.plane import connect, disconnect

__all__ = [
    "Agent",
    "AgentMemory",
    "AgentResult",
    "ComposableMemory",
    "FastAIAgentError",
    "LLMClient",
    "Memory",
    "MemoryBlock",
    "RunContext",
    "StaticBlock",
    "__version__",
    "connect",
    "disconnect",
]
