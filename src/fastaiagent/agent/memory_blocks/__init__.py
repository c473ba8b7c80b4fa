"""The shipped memory blocks, one module each."""

from fastaiagent.agent.memory_blocks.persistent import PersistentFactBlock
from fastaiagent.agent.memory_blocks.plane import PlaneFactBlock
from fastaiagent.agent.memory_blocks.static import StaticBlock

__all__ = ["PersistentFactBlock", "PlaneFactBlock", "StaticBlock"]
