"""The OpenAI Agents SDK on fastaiagent: a durable ``Session`` and the user's facts.

- :class:`FastAIAgentSession` keeps a conversation's items (the SDK's
  ``Session`` protocol: ``get_items``, ``add_items``, ``pop_item``,
  ``clear_session``) as namespaced items in the same SQLite file, Postgres
  database or Redis server as the facts.
- :func:`user_facts_instructions` puts the user's durable facts
  (``Memory.retrieve``) into an agent's instructions on every run;
  :func:`user_facts_tools` gives the model tools to recall facts by meaning and
  to remember new ones. The user is taken from the run's context, never from a
  tool argument, so a model cannot read or write another user's memory.

Install with ``pip install 'fastaiagent[openai-agents]'``.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastaiagent._optional import require
from fastaiagent._validate import identifier, positive_int, positive_number
from fastaiagent.agent.memory import Memory
from fastaiagent.facts.items import ItemWrite, Namespace
from fastaiagent.integrations.items import item_store_for, root_namespace

require("agents", "openai-agents")

from agents import FunctionTool, RunContextWrapper, function_tool  # noqa: E402
from agents.memory import SessionSettings  # noqa: E402
from agents.memory.session_settings import resolve_session_limit  # noqa: E402

__all__ = ["FastAIAgentSession", "user_facts_instructions", "user_facts_tools"]

UserId = str | Callable[[Any], str | None] | None


class FastAIAgentSession:
    """An Agents SDK ``Session`` on a fastaiagent store.

    ``location`` is what ``Memory(location=...)`` takes (``"sqlite"``,
    ``"sqlite:///path.db"``, ``postgresql://...``, ``redis://...``, a fact
    store) or a :class:`~fastaiagent.Memory`. Items are kept in the order they
    were added (keys that sort by time); ``ttl_seconds`` lets a conversation's
    items expire that long after they were written. Every call runs the store
    I/O in a worker thread, so the event loop never waits.

    Example::

        session = FastAIAgentSession("user-42", "sqlite:///chat.db")
        await Runner.run(agent, "hi", session=session)
    """

    def __init__(
        self,
        session_id: str,
        location: Any = "sqlite",
        *,
        project_id: str = "",
        session_settings: SessionSettings | None = None,
        ttl_seconds: float | None = None,
    ) -> None:
        self.session_id = identifier("session_id", session_id)
        self.session_settings = session_settings
        self.ttl_seconds = positive_number("ttl_seconds", ttl_seconds, allow_none=True)
        self.items = item_store_for(location)
        self._namespace: Namespace = (*root_namespace("openai_agents", project_id), "sessions", session_id)
        self._last = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FastAIAgentSession(session_id={self.session_id!r}, items={self.items!r})"

    def _keys(self, count: int) -> list[str]:
        """``count`` new keys after every key this process made: nanoseconds (so
        writers in other processes interleave by time) and a random tail (so two
        writers in the same nanosecond never collide)."""
        with self._lock:
            first = max(time.time_ns(), self._last + 1)
            self._last = first + count - 1
        tail = secrets.token_hex(4)
        return [f"{first + i:020d}-{tail}" for i in range(count)]

    def _get(self, limit: int | None) -> list[Any]:
        if limit is not None and limit <= 0:
            return []
        if limit is None:
            found = self.items.scan(self._namespace, exact=True)
        else:
            found = self.items.scan(self._namespace, exact=True, descending=True, limit=limit)[::-1]
        return [json.loads(item.value) for item in found]

    def _add(self, items: list[Any]) -> None:
        writes = [
            ItemWrite(self._namespace, key, json.dumps(item), ttl_seconds=self.ttl_seconds)
            for key, item in zip(self._keys(len(items)), items, strict=True)
        ]
        if writes:
            self.items.write(writes)

    def _pop(self) -> Any:
        while True:
            last = self.items.scan(self._namespace, exact=True, descending=True, limit=1)
            if not last:
                return None
            if self.items.write([ItemWrite(self._namespace, last[0].key, None)])[0]:
                return json.loads(last[0].value)
            # Another writer popped it first: take the next one.

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The latest ``limit`` items (default: ``session_settings.limit``, else all),
        oldest first."""
        return await asyncio.to_thread(self._get, resolve_session_limit(limit, self.session_settings))

    async def add_items(self, items: list[Any]) -> None:
        """Append items to the conversation (one atomic write)."""
        await asyncio.to_thread(self._add, list(items))

    async def pop_item(self) -> Any:
        """Remove and return the newest item (None when the session is empty)."""
        return await asyncio.to_thread(self._pop)

    async def clear_session(self) -> None:
        """Delete every item of this session."""
        await asyncio.to_thread(self.items.delete_prefix, self._namespace)


def _user_of(user_id: UserId, context: RunContextWrapper[Any] | None) -> str | None:
    """The user a run acts for: fixed, computed from the run context, or read from
    it (a mapping's ``"user_id"`` or an object's ``user_id`` attribute)."""
    ctx = context.context if context is not None else None
    if isinstance(user_id, str):
        found: Any = user_id
    elif callable(user_id):
        found = user_id(ctx)
    else:
        found = ctx.get("user_id") if isinstance(ctx, dict) else getattr(ctx, "user_id", None)
    if found is None or found == "":
        return None
    return identifier("the run's user_id", found)  # the one id rule, whichever way it came


def user_facts_instructions(
    memory: Memory, instructions: str = "", *, user_id: UserId = None, limit: int = 20
) -> Callable[[RunContextWrapper[Any], Any], Awaitable[str]]:
    """Dynamic instructions for ``Agent(instructions=...)``: ``instructions``
    followed by the run's user's newest ``limit`` durable facts. ``user_id`` is
    a fixed id, a function of the run context, or None to read ``user_id`` from
    the context passed to ``Runner.run(..., context=...)``."""
    positive_int("limit", limit)

    async def render(context: RunContextWrapper[Any], agent: Any) -> str:
        user = _user_of(user_id, context)
        facts = await asyncio.to_thread(memory.retrieve, tier="user", id=user, limit=limit) if user else []
        if not facts:
            return instructions
        lines = "\n".join(f"- {fact.fact}" for fact in facts)
        return f"{instructions}\n\nWhat you know about this user:\n{lines}".strip()

    return render


def user_facts_tools(memory: Memory, *, user_id: UserId = None, limit: int = 10) -> list[FunctionTool]:
    """Two function tools for an Agents SDK agent: ``recall_user_facts(query)``
    (by meaning when the Memory has ``semantic=``, else the newest facts) and
    ``remember_user_fact(fact)``. The user comes from ``user_id`` or the run
    context as in :func:`user_facts_instructions`; without one the tools say so."""
    positive_int("limit", limit)

    @function_tool
    async def recall_user_facts(context: RunContextWrapper[Any], query: str = "") -> str:
        """Recall what is known about the current user, closest to `query` first."""
        user = _user_of(user_id, context)
        if not user:
            return "No user is identified for this run."
        by_meaning = query if query and memory.config.semantic is not None else None
        facts = await asyncio.to_thread(
            memory.retrieve, by_meaning, tier="user", id=user, limit=limit
        )
        return "\n".join(f"- {fact.fact}" for fact in facts) or "Nothing is known about this user yet."

    @function_tool
    async def remember_user_fact(context: RunContextWrapper[Any], fact: str) -> str:
        """Remember a durable fact about the current user (a preference, a detail)."""
        user = _user_of(user_id, context)
        if not user:
            return "No user is identified for this run: nothing was stored."
        await asyncio.to_thread(memory.persist, fact, tier="user", id=user)
        return f"Remembered: {fact}"

    return [recall_user_facts, remember_user_fact]
