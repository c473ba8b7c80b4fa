"""The agent runtime and the composable memory blocks."""

from fastaiagent.agent.agent import Agent, AgentResult, StreamDelta
from fastaiagent.agent.composable import ComposableMemory
from fastaiagent.agent.context import RunContext
from fastaiagent.agent.memory import Memory, UserMemory
from fastaiagent.agent.memory_blocks import (
    FactExtractionBlock,
    PersistentFactBlock,
    PlaneFactBlock,
    RecallOptions,
    StaticBlock,
    SummaryBlock,
    VectorBlock,
)
from fastaiagent.agent.memory_blocks.base import MemoryBlock, SharedMemoryContext
from fastaiagent.agent.middleware import Middleware, RedactPII
from fastaiagent.agent.tools import FunctionTool, tool
from fastaiagent.agent.window import AgentMemory
from fastaiagent.errors import MemoryIsolationError

__all__ = [
    "Agent",
    "AgentMemory",
    "AgentResult",
    "ComposableMemory",
    "FactExtractionBlock",
    "FunctionTool",
    "Memory",
    "MemoryBlock",
    "MemoryIsolationError",
    "Middleware",
    "PersistentFactBlock",
    "PlaneFactBlock",
    "RecallOptions",
    "RedactPII",
    "RunContext",
    "SharedMemoryContext",
    "StaticBlock",
    "StreamDelta",
    "SummaryBlock",
    "UserMemory",
    "VectorBlock",
    "tool",
]
