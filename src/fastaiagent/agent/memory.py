"""Memory: the recommended front door (tiers, per-user routing, direct verbs).

One object composes the blocks of :mod:`fastaiagent.agent.memory_blocks` for
each user: global facts, plane facts, user facts, summary, recall, then the
window. Everything durable lives in the FactStore at ``location``; windows,
summaries and recall indexes are per-user, in-process state (an LRU of at
most ``max_users`` users) that can be dropped at any time.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from fastaiagent.agent._checks import (
    check_embedder,
    check_llm,
    check_vector_option,
    optional_id,
    positive_int_or_none,
)
from fastaiagent.agent.composable import ComposableMemory
from fastaiagent.agent.memory_blocks.background import AfterReplyBlock
from fastaiagent.agent.memory_blocks.base import MemoryBlock
from fastaiagent.agent.memory_blocks.persistent import PersistentFactBlock
from fastaiagent.agent.verbs import DirectVerbs
from fastaiagent.agent.window import AgentMemory, MemoryTurn
from fastaiagent.agent.windows import DEFAULT_WINDOW_TTL
from fastaiagent.agent.windows.sync import shared_windows
from fastaiagent.errors import InvalidTypeError, InvalidValueError, UsageError
from fastaiagent.facts.factory import make_fact_store
from fastaiagent.facts.scoping import WILDCARD
from fastaiagent.facts.store import FactStore
from fastaiagent.llm.base import BaseLLM
from fastaiagent.llm.message import Message

logger = logging.getLogger("fastaiagent.memory")

DEFAULT_WINDOW = 20
DEFAULT_MAX_USERS = 10_000
DEFAULT_MAX_LEARNED = 200
DEFAULT_MAX_FACTS = 50
LEARNED_CONFIDENCE = 0.6
GLOBAL_HEADING = "Facts true for everyone using this agent:"
USER_HEADING = "Facts about this user:"

UserResolver = Callable[[Any], "str | None"]
_current_user: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "fastaiagent_memory_user", default=None
)


class _UserState:
    """One user's in-process memory: their ComposableMemory and its own blocks."""

    def __init__(self, user_id: str | None, memory: ComposableMemory, own_blocks: list[MemoryBlock]):
        self.user_id = user_id
        self.memory = memory
        self.own_blocks = own_blocks


class _Turn:
    """A run pinned to one user's state (resolved once, H13)."""

    def __init__(self, owner: Memory, state: _UserState | None, shared: ComposableMemory | None):
        self.owner = owner
        self.state = state
        self._shared = shared  # unresolved callers: shared blocks only, nothing kept
        self._token = _current_user.set(state.user_id if state else None)

    @property
    def _view(self) -> ComposableMemory:
        return self.state.memory if self.state else self._shared  # type: ignore[return-value]

    def context_messages(self, query: str) -> list[Message]:
        if self.state is not None and self.owner._windows is not None:
            self.owner._windows.refresh(self.state)
        return self._view.get_context(query)

    async def acontext_messages(self, query: str) -> list[Message]:
        if self.state is not None and self.owner._windows is not None:
            await self.owner._windows.arefresh(self.state)
        return await self._view.aget_context(query)

    def record(self, messages: Sequence[Message]) -> None:
        if self.state is not None and self.owner._windows is not None:
            self.owner._windows.record(self.state, messages)
        elif self.state is not None:
            self.state.memory.record(messages)

    async def arecord(self, messages: Sequence[Message]) -> None:
        if self.state is not None and self.owner._windows is not None:
            await self.owner._windows.arecord(self.state, messages)
        elif self.state is not None:
            await self.state.memory.arecord(messages)

    def close(self) -> None:
        # A turn closed from another context cannot reset; the var dies with that context.
        with contextlib.suppress(ValueError):
            _current_user.reset(self._token)


class UserMemory:
    """One user's window on a per-user :class:`Memory`, from ``Memory.for_user``."""

    def __init__(self, owner: Memory, user_id: str) -> None:
        self._owner = owner
        self.user_id = user_id

    def save(self, path: str | os.PathLike[str]) -> None:
        """Persist this user's window (and block state) to the directory ``path``."""
        state = self._owner._state_for(self.user_id)
        if self._owner._windows is not None:
            self._owner._windows.refresh(state)
        state.memory.save(path)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore state saved by :meth:`save`, before the user's next run."""
        state = self._owner._state_for(self.user_id)
        state.memory.load(path)
        if self._owner._windows is not None:
            self._owner._windows.push(state)

    @property
    def messages(self) -> list[Message]:
        """The messages in this user's window now."""
        state = self._owner._state_for(self.user_id)
        if self._owner._windows is not None:
            self._owner._windows.refresh(state)
        return state.memory.primary.get_messages()


class Memory(DirectVerbs):
    """Agent memory with tiers: global facts, per-user facts, and the session window.

    Use it as ``Agent(memory=Memory(...))``. Every keyword is checked here,
    before any run (see ``docs/how-memory-works.md``):

    - ``location``: where durable facts live: ``"sqlite"`` (default, a local
      file), ``postgres://``, ``redis://`` or any FactStore instance.
    - ``user_id``: a string, or a ``(ctx) -> str`` resolver called once per
      run with the run's ``context=``; unresolved callers get global facts only.
    - ``agent_id``: the global tier's id (facts true for everyone using the agent).
    - ``project_id``: a tenant partition applied to every tier.
    - ``window``: recent messages kept per user (default 20).
    - ``learn``: an LLM that extracts durable facts from each user message and
      persists them (confidence 0.6), at most ``max_learned_facts`` per user.
    - ``summarize``: an LLM folding messages that left the window into a summary.
    - ``recall``: ``"auto"`` (in-process index per user) or a shared VectorStore
      (namespaced per user) for semantic recall of past exchanges.
    - ``dedupe``: drop recalled items an earlier block already injected.
    - ``semantic``: ``"auto"`` or a VectorStore: ``retrieve(query, ...)`` by meaning.
    - ``embedder``: the embedder for recall and semantic (default ``"auto"``).
    - ``max_users``: users whose in-process state is kept (LRU; default 10,000).
    - ``plane_agent_id``: also inject a connected plane's curated facts.
    - ``max_facts``: facts injected per tier per turn (default 50).
    - ``learn_in_background``: run extraction and summaries after the reply
      (default True); ``flush()`` / ``aflush()`` wait for them.
    - ``windows`` / ``window_ttl_seconds``: share windows across processes
      (see ``docs/production.md``).
    """

    def __init__(
        self,
        location: str | FactStore = "sqlite",
        *,
        user_id: str | UserResolver | None = None,
        agent_id: str | None = None,
        project_id: str = "",
        window: int = DEFAULT_WINDOW,
        learn: BaseLLM | None = None,
        max_learned_facts: int | None = DEFAULT_MAX_LEARNED,
        summarize: BaseLLM | None = None,
        recall: Any = None,
        dedupe: bool = False,
        semantic: Any = None,
        embedder: Any = None,
        max_users: int | None = DEFAULT_MAX_USERS,
        plane_agent_id: str | None = None,
        max_facts: int = DEFAULT_MAX_FACTS,
        windows: Any = None,
        window_ttl_seconds: float | None = DEFAULT_WINDOW_TTL,
        learn_in_background: bool = True,
    ) -> None:
        if user_id is not None and not callable(user_id):
            user_id = optional_id("user_id", user_id)
        self.agent_id = optional_id("agent_id", agent_id)
        self.plane_agent_id = optional_id("plane_agent_id", plane_agent_id)
        if not isinstance(project_id, str) or project_id == WILDCARD:
            raise InvalidValueError('project_id must be a str (not "*")')
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise InvalidValueError(f"window must be a positive int, got {window!r}")
        positive_int_or_none("max_learned_facts", max_learned_facts)
        positive_int_or_none("max_users", max_users)
        if isinstance(max_facts, bool) or not isinstance(max_facts, int) or max_facts < 1:
            raise InvalidValueError(f"max_facts must be a positive int, got {max_facts!r}")
        if not isinstance(dedupe, bool):
            raise InvalidTypeError("dedupe must be True or False")
        if not isinstance(learn_in_background, bool):
            raise InvalidTypeError("learn_in_background must be True or False")
        check_embedder(embedder)
        self.learn = check_llm("learn", learn)
        self.summarize = check_llm("summarize", summarize)
        if self.learn is not None and user_id is None:
            raise InvalidValueError("learn= stores facts per user: set user_id= (a string or a resolver)")
        self.recall = check_vector_option("recall", recall)
        self.semantic = check_vector_option("semantic", semantic)
        self.user_id = user_id
        self.project_id = project_id
        self.window = window
        self.max_learned_facts = max_learned_facts
        self.dedupe = dedupe
        self.embedder_spec = embedder
        self.max_users = max_users
        self.max_facts = max_facts
        self.learn_in_background = learn_in_background
        self.store: FactStore = make_fact_store(location)
        # windows=: None keeps windows in process; else the LRU caches a shared store.
        self._windows = shared_windows(self, windows, location, window_ttl_seconds)

        self._lock = threading.RLock()
        self._users: OrderedDict[str, _UserState] = OrderedDict()
        self._single: _UserState | None = None
        self._shared_blocks: list[MemoryBlock] | None = None
        self._warned_resolvers: set[int] = set()
        self._warned_drop = False
        self._embedder: Any = None
        self._semantic_index: Any = None
        self._queue: Any = None

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return (
            f"Memory(store={self.store!r}, agent_id={self.agent_id!r}, "
            f"per_user={self.per_user}, window={self.window})"
        )

    @property
    def per_user(self) -> bool:
        """True when ``user_id`` is a resolver: one window per resolved user."""
        return callable(self.user_id)

    # -- composition ---------------------------------------------------------

    def _build(self, label: str, factory: Callable[[], MemoryBlock]) -> MemoryBlock | None:
        try:
            return factory()
        except Exception as exc:  # a block that cannot start degrades memory, not the run
            logger.warning("memory block %s could not be built; running without it: %s", label, exc)
            return None

    def shared_blocks(self) -> list[MemoryBlock]:
        """Blocks every caller sees, resolved or not: global facts, then plane facts."""
        with self._lock:
            if self._shared_blocks is None:
                blocks: list[MemoryBlock | None] = []
                if self.agent_id:
                    blocks.append(self._build("global facts", self._global_block))
                if self.plane_agent_id:
                    blocks.append(self._build("plane facts", self._plane_block))
                self._shared_blocks = [b for b in blocks if b is not None]
            return self._shared_blocks

    def _global_block(self) -> MemoryBlock:
        return PersistentFactBlock(
            scope="agent",
            scope_id=self.agent_id or WILDCARD,
            project_id=self.project_id,
            max_facts=self.max_facts,
            store=self.store,
            heading=GLOBAL_HEADING,
            name="persistent_facts",
        )

    def _plane_block(self) -> MemoryBlock:
        from fastaiagent.agent.memory_blocks.plane import PlaneFactBlock

        return PlaneFactBlock(agent_id=self.plane_agent_id or "")

    def user_blocks(self, user_id: str | None) -> list[MemoryBlock]:
        """One user's own blocks in prompt order: user facts, summary, recall, learning."""
        builders: list[tuple[str, Callable[[], MemoryBlock]]] = []
        if user_id is not None:
            builders.append(("user facts", lambda: self._user_fact_block(user_id)))
        if self.summarize is not None:
            builders.append(("summary", lambda: self._after_reply(self._summary_block())))
        if self.recall is not None:
            builders.append(("recall", lambda: self._recall_block(user_id)))
        if self.learn is not None and user_id is not None:
            builders.append(("learn", lambda: self._after_reply(self._learn_block(user_id))))
        built = [self._build(label, factory) for label, factory in builders]
        return [b for b in built if b is not None]

    def _after_reply(self, block: MemoryBlock) -> MemoryBlock:
        return AfterReplyBlock(block, self.background_queue()) if self.learn_in_background else block

    def background_queue(self) -> Any:
        """The queue that runs extraction and summaries after replies, made on first use."""
        with self._lock:
            if self._queue is None:
                from fastaiagent.agent.memory_blocks.background import BackgroundQueue

                self._queue = BackgroundQueue(name="fastaiagent-memory-learning")
            return self._queue

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for background learning (extraction, summaries) queued so far.

        Returns False if ``timeout`` passed first. Queued work is also drained
        at normal interpreter exit, so no learned fact is lost.
        """
        return True if self._queue is None else bool(self._queue.flush(timeout))

    async def aflush(self, timeout: float | None = None) -> bool:
        """Async :meth:`flush`; waits without holding the event loop."""
        return True if self._queue is None else bool(await self._queue.aflush(timeout))

    def _user_fact_block(self, user_id: str) -> MemoryBlock:
        return PersistentFactBlock(
            scope="user",
            scope_id=user_id,
            project_id=self.project_id,
            max_facts=self.max_facts,
            store=self.store,
            heading=USER_HEADING,
            name="persistent_facts.user",
        )

    def _summary_block(self) -> MemoryBlock:
        from fastaiagent.agent.memory_blocks.summary import SummaryBlock

        # The summary covers what left the window, never what is still in it.
        assert self.summarize is not None
        return SummaryBlock(llm=self.summarize, keep_last=self.window)

    def recall_namespace(self, user_id: str | None) -> str:
        """``user:<id>`` (``<project>:user:<id>`` with a project); ``default`` without a user."""
        if user_id is None:
            return "default"
        base = f"user:{user_id}"
        return f"{self.project_id}:{base}" if self.project_id else base

    def embedder(self) -> Any:
        """The embedder shared by recall and semantic retrieval, made on first use."""
        with self._lock:
            if self._embedder is None:
                from fastaiagent.kb.embedding import get_embedder

                self._embedder = get_embedder(self.embedder_spec or "auto")
            return self._embedder

    def _recall_block(self, user_id: str | None) -> MemoryBlock:
        from fastaiagent.agent.memory_blocks.vector import VectorBlock

        embedder = self.embedder()
        if self.recall == "auto":
            from fastaiagent.kb.backends.faiss import FaissVectorStore

            store = FaissVectorStore(dimension=embedder.dimension)
        else:
            store = self.recall
        return VectorBlock(
            store=store,
            embedder=embedder,
            namespace=self.recall_namespace(user_id),
            dedupe_against_upstream=self.dedupe,
        )

    def _learn_block(self, user_id: str) -> MemoryBlock:
        from fastaiagent.agent.memory_blocks.facts import FactExtractionBlock

        assert self.learn is not None
        return FactExtractionBlock(
            llm=self.learn,
            roles=("user",),
            inject=False,  # the user fact block injects them, once
            persist=True,
            scope="user",
            scope_id=user_id,
            project_id=self.project_id,
            confidence=LEARNED_CONFIDENCE,
            max_persisted=self.max_learned_facts,
            store=self.store,
        )

    def _new_state(self, user_id: str | None) -> _UserState:
        own = self.user_blocks(user_id)
        if self._windows is not None:
            own = self._windows.inline_summaries(own)
        memory = ComposableMemory(
            blocks=[*self.shared_blocks(), *own], primary=AgentMemory(max_messages=self.window)
        )
        return _UserState(user_id, memory, own)

    # -- per-user routing --------------------------------------------------

    def resolve_user(self, context: Any) -> str | None:
        """The user a run belongs to, or None for an unresolved caller."""
        if not callable(self.user_id):
            return self.user_id
        if context is None:
            return None
        try:
            resolved = self.user_id(context)
        except Exception as exc:
            key = id(self.user_id)
            if key not in self._warned_resolvers:
                self._warned_resolvers.add(key)
                hint = ""
                if isinstance(getattr(context, "state", None), dict):
                    hint = (
                        ' The run state is a dict: read it with ctx.state["user_id"], '
                        "not ctx.state.user_id."
                    )
                logger.warning(
                    "user_id resolver raised %s: %s; the run gets no conversation memory.%s",
                    type(exc).__name__,
                    exc,
                    hint,
                )
            return None
        if resolved is None or resolved == "":
            return None
        if not isinstance(resolved, str):
            resolved = str(resolved)
        return resolved

    def _state_for(self, user_id: str | None) -> _UserState:
        with self._lock:
            if not self.per_user:
                if self._single is None:
                    self._single = self._new_state(user_id)
                return self._single
            assert user_id is not None
            state = self._users.get(user_id)
            if state is not None:
                self._users.move_to_end(user_id)
                return state
            state = self._new_state(user_id)
            self._users[user_id] = state
            if self.max_users is not None:
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
            return state

    def start_turn(self, context: Any = None) -> MemoryTurn:
        """Pin a run to its user: resolved once, used for the run's read and write."""
        user = self.resolve_user(context)
        if self.per_user and user is None:
            shared = ComposableMemory(blocks=self.shared_blocks(), primary=AgentMemory(max_messages=1))
            return _Turn(self, None, shared)
        return _Turn(self, self._state_for(user), None)

    @property
    def cached_users(self) -> list[str]:
        """Users whose windows are held now, least recently used first."""
        with self._lock:
            return list(self._users)

    def for_user(self, user_id: str) -> UserMemory:
        """One user's window, for save/load outside a run (per-user Memory only)."""
        if not self.per_user:
            raise UsageError(
                "for_user() is for a Memory with a user_id resolver; this Memory has one "
                "window: call save()/load() on it directly"
            )
        return UserMemory(self, optional_id("user_id", user_id) or "")

    def drop_user(self, user_id: str) -> bool:
        """Drop a user's in-process state (window, summary, recall index), and with
        ``windows=`` their stored window too, for every worker. Facts stay."""
        stored = self._windows.drop(user_id) if self._windows is not None else False
        with self._lock:
            state = self._users.pop(user_id, None)
            if state is None and self._single is not None and self._single.user_id == user_id:
                state, self._single = self._single, None
        if state is None:
            return stored
        for block in state.own_blocks:
            try:
                block.clear()
            except Exception as exc:
                logger.warning("memory block %r failed to clear: %s", block.name, exc)
        return True

    # -- save / load -------------------------------------------------------

    def _current_state(self, verb: str) -> _UserState:
        if not self.per_user:
            return self._state_for(self.user_id)
        user = _current_user.get()
        if user is None:
            raise UsageError(
                f"{verb}() on a per-user Memory needs a current user, and there is none outside "
                f'a run: use mem.for_user("alice").{verb}(path)'
            )
        return self._state_for(user)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Save the window and block state to the directory ``path``."""
        state = self._current_state("save")
        if self._windows is not None:
            self._windows.refresh(state)
        state.memory.save(path)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Load state saved by :meth:`save`."""
        state = self._current_state("load")
        state.memory.load(path)
        if self._windows is not None:
            self._windows.push(state)

    def _forget_user_state(self, user_id: str) -> None:
        users = self.cached_users if user_id == WILDCARD else [user_id]
        if user_id == WILDCARD and self._windows is not None:
            self._windows.drop_all()
        for user in users:
            self.drop_user(user)
        if self._single is not None and user_id in (WILDCARD, self._single.user_id):
            self.drop_user(self._single.user_id or "")
        if self.recall not in (None, "auto"):
            purge = getattr(self.recall, "delete_namespace", None)
            if user_id == WILDCARD:
                logger.warning("forget(id='*') cannot enumerate recall namespaces of a shared store")
            elif purge is not None:
                purge(self.recall_namespace(user_id))

    def semantic_index(self) -> Any:
        """The semantic fact index (``semantic=``), made on first use."""
        with self._lock:
            if self._semantic_index is None:
                from fastaiagent.facts.semantic import SemanticFactIndex

                self._semantic_index = SemanticFactIndex(self.store, self.semantic, self.embedder())
            return self._semantic_index
