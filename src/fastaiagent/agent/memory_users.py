"""Per-user routing: resolve a run's user once, and keep each user's state in an LRU.

A user's *state* is their ComposableMemory (window + blocks) in this process.
It is derived data: dropping it (LRU eviction, ``drop_user``) loses only the
window and in-process caches; durable facts stay in the store.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from fastaiagent import trace
from fastaiagent.agent.composable import ComposableMemory
from fastaiagent.agent.memory_blocks.background import current_user
from fastaiagent.agent.memory_blocks.base import MemoryBlock
from fastaiagent.facts.scoping import check_message_size, id_problem
from fastaiagent.llm.message import Message

logger = logging.getLogger("fastaiagent.memory")

# The user of the run in progress (for save()/load() inside a run, and the lane
# of learning it queues) lives with the background queue, which reads it.


class UserState:
    """One user's in-process memory: their ComposableMemory and its own blocks."""

    def __init__(
        self, user_id: str | None, memory: ComposableMemory, own_blocks: list[MemoryBlock]
    ) -> None:
        self.user_id = user_id
        self.memory = memory
        self.own_blocks = own_blocks


def _describe(value: Any) -> str:
    if isinstance(value, str):
        return repr(value[:40])
    return f"a {type(value).__name__}"


class UserResolution:
    """Turns a run's ``context`` into a user id with the configured resolver.

    A resolver that raises, or returns something that is not a user id (``"*"``,
    a whitespace-only str, a bool, a list...), gets one warning (per resolver)
    and the run gets no conversation memory; it never fails the run. ``None``
    or ``""`` means an unknown caller (no warning); an int or UUID is its text.
    """

    def __init__(self, user_id: Any) -> None:
        self.user_id = user_id
        self._warned: set[tuple[int, str]] = set()

    def resolve(self, context: Any) -> str | None:
        if not callable(self.user_id):
            return self.user_id
        if context is None:
            return None
        try:
            resolved = self.user_id(context)
        except Exception as exc:
            self._warn(exc, context)
            return None
        if resolved is None or resolved == "":  # the documented "unknown caller"
            return None
        if isinstance(resolved, (int, uuid.UUID)) and not isinstance(resolved, bool):
            resolved = str(resolved)  # numeric and UUID ids are ids; their text is the key
        if isinstance(resolved, str) and resolved.strip():
            problem = id_problem(resolved)
            if problem is None:
                return resolved
            self._refuse(resolved, problem)
            return None
        self._refuse(resolved)
        return None

    def _once(self, kind: str) -> bool:
        """True the first time a resolver misbehaves this way (one warning each)."""
        key = (id(self.user_id), kind)
        if key in self._warned:
            return False
        self._warned.add(key)
        return True

    def _refuse(self, resolved: Any, problem: str | None = None) -> None:
        # A resolved id is an id, never a selector: "*" would read every user's
        # facts into the prompt, a blank one would file a window under no one,
        # and an id a verb refuses (NUL, too long) would be kept nowhere.
        if not self._once("refused"):
            return
        logger.warning(
            "user_id resolver returned %s%s; that is not a user id, so the run gets no "
            "conversation memory (global facts only). Return a non-blank str other than "
            '"*" (None or "" for an unknown caller), as persist(id=...) takes. This warning '
            "is shown once per resolver.",
            _describe(resolved)[:80], f" (it {problem})" if problem else "",
        )

    def _warn(self, exc: Exception, context: Any) -> None:
        if not self._once("raised"):
            return
        hint = ""
        if isinstance(exc, AttributeError) and isinstance(getattr(context, "state", None), dict):
            hint = (
                ' The run state is a dict: read it with ctx.state["user_id"], '
                "not ctx.state.user_id."
            )
        elif isinstance(exc, (KeyError, AttributeError)):
            hint = " The run's context has no user id there: pass it in RunContext(state=...)."
        logger.warning(
            "user_id resolver raised %s: %s; the run gets no conversation memory.%s",
            type(exc).__name__,
            exc,
            hint,
        )


class UserCache:
    """The states of the users this process served recently, least recent first.

    With one fixed user (or none) there is a single state; with a resolver,
    at most ``max_users`` states (None: no cap), dropping the least recently used.
    """

    def __init__(
        self, per_user: bool, max_users: int | None, build: Callable[[str | None], UserState]
    ) -> None:
        self.per_user = per_user
        self.max_users = max_users
        self._build = build
        self._lock = threading.RLock()
        self._users: OrderedDict[str, UserState] = OrderedDict()
        self._single: UserState | None = None
        self._warned_drop = False

    def get(self, user_id: str | None) -> UserState:
        """The user's state, built on first use (and marked most recently used)."""
        with self._lock:
            if not self.per_user:
                if self._single is None:
                    self._single = self._build(user_id)
                return self._single
            assert user_id is not None
            state = self._users.get(user_id)
            if state is not None:
                self._users.move_to_end(user_id)
                return state
            state = self._users[user_id] = self._build(user_id)
            self._evict()
            return state

    def _evict(self) -> None:
        if self.max_users is None:
            return
        while len(self._users) > self.max_users:
            dropped, _ = self._users.popitem(last=False)
            if not self._warned_drop:
                self._warned_drop = True
                logger.warning(
                    "Memory holds windows for max_users=%d users; dropped the least "
                    "recently used (%s). Its durable facts stay in the store. "
                    "This warning is shown once.",
                    self.max_users,
                    dropped,
                )

    def users(self) -> list[str]:
        """Users whose states are held now, least recently used first."""
        with self._lock:
            return list(self._users)

    def pop(self, user_id: str) -> UserState | None:
        """Remove and return a user's state (the single state when it is theirs)."""
        with self._lock:
            state = self._users.pop(user_id, None)
            if state is None and self._single is not None and self._single.user_id == user_id:
                state, self._single = self._single, None
            return state

    @property
    def single_user(self) -> str | None:
        """The user of the single state, when it exists."""
        return self._single.user_id if self._single is not None else None

    def has_single(self) -> bool:
        return self._single is not None


class Turn:
    """A run pinned to one user's state: resolved once, used for its read and write.

    ``windows`` (a SharedWindows, or None) keeps the state in step with other
    processes. An unresolved caller gets the shared blocks only and keeps nothing.
    """

    def __init__(self, state: UserState | None, view: ComposableMemory, windows: Any) -> None:
        self.state = state
        self._view = view
        self._windows = windows if state is not None else None
        self._token = current_user.set(state.user_id if state else None)

    def _tag_run(self) -> None:
        # The run's root span names its user, so forget can find and erase the run.
        if self.state is not None and self.state.user_id:
            trace.annotate({"memory.user_id": self.state.user_id})

    def context_messages(self, query: str) -> list[Message]:
        self._tag_run()
        if self._windows is not None:
            check_message_size("user", query)  # a shared window stores it: refuse before the model runs
            self._windows.refresh(self.state)
        return self._view.get_context(query)

    async def acontext_messages(self, query: str) -> list[Message]:
        self._tag_run()
        if self._windows is not None:
            check_message_size("user", query)
            await self._windows.arefresh(self.state)
        return await self._view.aget_context(query)

    def record(self, messages: Sequence[Message]) -> None:
        if self._windows is not None:
            for message in messages:
                check_message_size(message.role, message.content)
            self._windows.record(self.state, messages)
        elif self.state is not None:
            self.state.memory.record(messages)

    async def arecord(self, messages: Sequence[Message]) -> None:
        if self._windows is not None:
            for message in messages:
                check_message_size(message.role, message.content)
            await self._windows.arecord(self.state, messages)
        elif self.state is not None:
            await self.state.memory.arecord(messages)

    def close(self) -> None:
        # A turn closed from another context cannot reset; the var dies with that context.
        with contextlib.suppress(ValueError):
            current_user.reset(self._token)
