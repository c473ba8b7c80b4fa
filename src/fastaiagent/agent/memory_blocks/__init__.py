"""The shipped memory blocks, one module each."""

from fastaiagent.agent.memory_blocks.background import BackgroundQueue
from fastaiagent.agent.memory_blocks.fact_policy import FactPolicy, default_fact_policy
from fastaiagent.agent.memory_blocks.facts import FactExtractionBlock
from fastaiagent.agent.memory_blocks.persistent import PersistentFactBlock
from fastaiagent.agent.memory_blocks.plane import PlaneFactBlock
from fastaiagent.agent.memory_blocks.recall_options import RecallOptions
from fastaiagent.agent.memory_blocks.static import StaticBlock
from fastaiagent.agent.memory_blocks.summary import SummaryBlock
from fastaiagent.agent.memory_blocks.vector import VectorBlock

__all__ = [
    "BackgroundQueue",
    "FactExtractionBlock",
    "FactPolicy",
    "PersistentFactBlock",
    "PlaneFactBlock",
    "RecallOptions",
    "StaticBlock",
    "SummaryBlock",
    "VectorBlock",
    "default_fact_policy",
]
