"""The in-process LRU as a cache in front of a WindowStore.

At a turn's first read the user's cached state is checked against the store
(one round trip; the state travels only when another worker changed it). After
the turn, its messages are applied locally and written back with
compare-and-set on the version that was loaded. On a conflict - another worker
served this user meanwhile - the newer state is loaded and the turn's messages
are applied to it again, so no turn is lost and each stays in one piece.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from fastaiagent import trace
from fastaiagent._io import decode_json
from fastaiagent.agent.windows import check_ttl, make_window_store
from fastaiagent.errors import ConflictError, InvalidValueError, is_configuration_error
from fastaiagent.facts.windows import WindowKey, WindowStore
from fastaiagent.llm.message import Message

logger = logging.getLogger("fastaiagent.memory")

STATE_FORMAT = 1
MAX_ATTEMPTS = 100  # compare-and-set retries of one turn before giving up (never seen in tests)


class _Sync:
    """What the cache knows about one user's state: its stored version and a lock."""

    __slots__ = ("lock", "version")

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.version: str | None = None


class SharedWindows:
    """Keeps per-user states (:class:`~fastaiagent.agent.memory_users.UserState`)
    in step with a :class:`WindowStore`.

    ``rebuild(user_id)`` makes a fresh state; it replaces a cached one whose
    stored window expired or was deleted by another worker.
    """

    def __init__(
        self,
        store: WindowStore,
        *,
        agent_id: str | None,
        project_id: str,
        ttl_seconds: float | None,
        rebuild: Callable[[str | None], Any],
    ) -> None:
        self.store = store
        self.agent_id = agent_id or ""
        self.project_id = project_id
        self.ttl_seconds = ttl_seconds
        self._rebuild = rebuild
        self._syncs: weakref.WeakKeyDictionary[Any, _Sync] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._warned_outage = 0.0
        self.conflicts = 0  # writes that lost a compare-and-set and re-applied their turn

    def key(self, user_id: str | None) -> WindowKey:
        """The store key of a user (a Memory without users has one window, user "")."""
        return WindowKey(self.agent_id, self.project_id, user_id or "")

    def _sync(self, state: Any) -> _Sync:
        with self._lock:
            sync = self._syncs.get(state)
            if sync is None:
                sync = self._syncs[state] = _Sync()
            return sync

    def _outage(self, verb: str, exc: Exception) -> None:
        # A store outage degrades to in-process windows; say so at most once a minute.
        now = time.monotonic()
        if now - self._warned_outage > 60:
            self._warned_outage = now
            logger.warning(
                "shared window store %r failed to %s (%s: %s); using this process's copy",
                self.store, verb, type(exc).__name__, exc,
            )

    # -- state <-> text ------------------------------------------------------

    @staticmethod
    def encode(state: Any) -> str:
        data = state.memory.dump_state(blocks=state.own_blocks)
        data["format"] = STATE_FORMAT
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    def _apply(self, state: Any, sync: _Sync, version: str | None, text: str | None) -> None:
        """Make the cached state match the stored one (``text`` None: nothing stored)."""
        if text is not None:
            try:
                data = decode_json(text)
                if not isinstance(data, dict) or data.get("format", STATE_FORMAT) > STATE_FORMAT:
                    raise InvalidValueError(f"unknown state format {data.get('format')!r}")
                state.memory.load_state(data)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                # Unreadable (corrupt, or written by a newer SDK): start the window over;
                # keeping the version lets the next write replace it.
                logger.error(
                    "stored window of user %r is unreadable (%s); starting it over",
                    state.user_id, exc,
                )
                text = None
        if text is None:
            fresh = self._rebuild(state.user_id)
            state.memory, state.own_blocks = fresh.memory, fresh.own_blocks
        sync.version = version

    def _reload(self, state: Any, sync: _Sync) -> None:
        stored = self.store.load(self.key(state.user_id))
        if stored is None:
            self._apply(state, sync, None, None)
        else:
            self._apply(state, sync, stored.version, stored.state)

    # -- the turn path -------------------------------------------------------

    def refresh(self, state: Any) -> None:
        """Bring a cached state up to date before a turn reads it."""
        sync = self._sync(state)
        with sync.lock, trace.span("memory.window.load", {"memory.user_id": state.user_id or ""}):
            try:
                stored = self.store.load(self.key(state.user_id), sync.version)
            except Exception as exc:
                if is_configuration_error(exc):
                    raise  # not an outage: no process's copy stands in for it
                self._outage("load", exc)
                return
            if stored is None:
                if sync.version is not None:  # expired or deleted elsewhere
                    self._apply(state, sync, None, None)
            elif stored.version != sync.version:
                self._apply(state, sync, stored.version, stored.state)

    def record(self, state: Any, messages: Sequence[Message]) -> None:
        """Apply a turn's messages and write the state back; re-apply on conflicts."""
        sync = self._sync(state)
        with sync.lock, trace.span("memory.window.save", {"memory.user_id": state.user_id or ""}):
            state.memory.record(messages)
            conflicts = 0
            try:
                for attempt in range(MAX_ATTEMPTS):
                    version = self.store.save(
                        self.key(state.user_id), self.encode(state), sync.version, self.ttl_seconds
                    )
                    if version is not None:
                        sync.version = version
                        trace.annotate({"memory.window.conflicts": conflicts})
                        return
                    conflicts += 1
                    self.conflicts += 1
                    if attempt:  # a busy user: let the other writer finish
                        time.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))
                    self._reload(state, sync)
                    state.memory.record(messages)
            except Exception as exc:
                if is_configuration_error(exc):
                    raise  # not an outage: no process's copy stands in for it
                self._outage("save", exc)
                return
            logger.error(
                "shared window of %r: %d write conflicts in a row; this turn was kept in "
                "this process only", state.user_id, MAX_ATTEMPTS,
            )

    async def arecord(self, state: Any, messages: Sequence[Message]) -> None:
        """:meth:`record` in a worker thread: store I/O never holds the event loop."""
        await asyncio.to_thread(self.record, state, messages)

    async def arefresh(self, state: Any) -> None:
        """:meth:`refresh` in a worker thread."""
        await asyncio.to_thread(self.refresh, state)

    def push(self, state: Any) -> None:
        """Store the cached state as it is now (after ``load()`` from a file)."""
        sync = self._sync(state)
        with sync.lock:
            current = self.store.load(self.key(state.user_id), sync.version)
            expected = None if current is None else current.version
            version = self.store.save(
                self.key(state.user_id), self.encode(state), expected, self.ttl_seconds
            )
            if version is None:
                raise ConflictError("another worker wrote this window meanwhile; load() again")
            sync.version = version

    def drop(self, user_id: str) -> bool:
        """Delete one user's stored window; True when there was one."""
        return self.store.delete(self.key(user_id))

    def drop_everywhere(self, user_id: str) -> int:
        """Delete a user's stored windows of every agent in this project (forget)."""
        return self.store.delete_user(self.project_id, user_id)

    def drop_all(self) -> int:
        """Delete every stored window of this agent and project."""
        return self.store.delete_all(self.agent_id, self.project_id)

    @staticmethod
    def inline_summaries(blocks: list[Any]) -> list[Any]:
        """Unwrap summary blocks that would update after the reply, in the background.

        A shared window is written when the turn ends, so the summary must have
        seen the turn by then, or another worker would load a summary that never
        learns of it. Fact extraction stays in the background: its facts go to the
        shared fact store anyway.
        """
        from fastaiagent.agent.memory_blocks.summary import SummaryBlock

        out = []
        for block in blocks:
            inner = getattr(block, "block", None)
            out.append(inner if isinstance(inner, SummaryBlock) else block)
        return out


def shared_windows(
    config: Any, windows: Any, fact_store: Any, location: Any, rebuild: Callable[[str | None], Any]
) -> SharedWindows | None:
    """The window sync of a Memory (None: windows stay in process), checked now.

    ``config`` is the Memory's MemoryConfig (agent, project, TTL); ``rebuild``
    makes a fresh user state when a stored window expired or was deleted.
    """
    store = make_window_store(windows, fact_store, location)
    if store is None:
        return None
    return SharedWindows(
        store,
        agent_id=config.agent_id,
        project_id=config.project_id,
        ttl_seconds=check_ttl(config.window_ttl),
        rebuild=rebuild,
    )
