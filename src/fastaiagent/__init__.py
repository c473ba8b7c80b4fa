"""fastaiagent: agents that remember, per user and across sessions."""

from fastaiagent.agent import (
    Agent,
    AgentMemory,
    AgentResult,
    ComposableMemory,
    MemoryBlock,
    RunContext,
    StaticBlock,
)
from fastaiagent.agent.tiered import Memory
from fastaiagent.llm import LLMClient
from fastaiagent.plane import connect, disconnect

__version__ = "1.80.0"

__all__ = [
    "Agent",
    "AgentMemory",
    "AgentResult",
    "ComposableMemory",
    "LLMClient",
    "Memory",
    "MemoryBlock",
    "RunContext",
    "StaticBlock",
    "__version__",
    "connect",
    "disconnect",
]
