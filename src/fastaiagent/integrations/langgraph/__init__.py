"""LangGraph on fastaiagent's stores: :class:`FastAIAgentSaver` (checkpointer,
thread state) and :class:`FastAIAgentStore` (``BaseStore``, long-term memory).

Install with ``pip install 'fastaiagent[langgraph]'``.
"""

from fastaiagent.integrations.langgraph.checkpoint import FastAIAgentSaver
from fastaiagent.integrations.langgraph.store import FastAIAgentStore

__all__ = ["FastAIAgentSaver", "FastAIAgentStore"]
