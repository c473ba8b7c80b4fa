"""Memory: the recommended front door (tiers, per-user routing, direct verbs).

A Memory is a few small parts put together:

- :class:`~fastaiagent.agent.memory_config.MemoryConfig`: every keyword, checked once;
- a :class:`~fastaiagent.facts.store.FactStore` made from ``location`` (the durable part);
- :class:`~fastaiagent.agent.memory_stack.MemoryStack`: which blocks each user gets;
- :class:`~fastaiagent.agent.memory_users.UserCache`: each user's window and blocks
  in this process (an LRU of at most ``max_users``), optionally kept in step with
  other processes by shared windows;
- :class:`~fastaiagent.agent.verbs.MemoryVerbs`: persist / retrieve / update / forget.

Everything durable lives in the store at ``location``; windows, summaries and
recall indexes are per-user state that can be dropped at any time.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import IO, TYPE_CHECKING, Any, Literal

from fastaiagent import trace
from fastaiagent._validate import identifier, optional_id
from fastaiagent.agent.composable import ComposableMemory
from fastaiagent.agent.deprecation import UNSET, warn_renamed
from fastaiagent.agent.forgetting import PEERS, attributed, drop_stored_windows
from fastaiagent.agent.memory_blocks.background import flush_lane_everywhere
from fastaiagent.agent.memory_blocks.base import described
from fastaiagent.agent.memory_blocks.fact_policy import FactPolicy
from fastaiagent.agent.memory_blocks.recall_options import RecallOptions
from fastaiagent.agent.memory_config import (
    DEFAULT_MAX_FACTS,
    DEFAULT_MAX_LEARNED,
    DEFAULT_MAX_USERS,
    DEFAULT_WINDOW,
    DEFAULT_WINDOW_TTL,
    MemoryConfig,
    UserResolver,
)
from fastaiagent.agent.memory_stack import MemoryStack
from fastaiagent.agent.memory_users import Turn, UserCache, UserResolution, UserState, current_user
from fastaiagent.agent.verbs import DEFAULT_PAGE, FactPage, FactWrite, MemoryVerbs, by_name
from fastaiagent.agent.window import AgentMemory, MemoryTurn
from fastaiagent.agent.windows.sync import shared_windows
from fastaiagent.errors import InvalidValueError, UsageError
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.factory import make_fact_store
from fastaiagent.facts.scoping import WILDCARD
from fastaiagent.facts.store import FactStore
from fastaiagent.facts.transfer.records import Counts
from fastaiagent.facts.validity import Clock
from fastaiagent.facts.windows import WindowStore
from fastaiagent.llm.base import BaseLLM
from fastaiagent.llm.message import Message
from fastaiagent.plane.client import PlaneConnection

if TYPE_CHECKING:
    from fastaiagent.kb.embedding import Embedder
    from fastaiagent.kb.protocols import VectorStore

logger = logging.getLogger("fastaiagent.memory")


class UserMemory:
    """One user's window on a per-user :class:`Memory`, from ``Memory.for_user``."""

    def __init__(self, owner: Memory, user_id: str) -> None:
        self._owner = owner
        self.user_id = user_id

    def save(self, path: str | os.PathLike[str]) -> None:
        """Persist this user's window (and block state) to the directory ``path``."""
        self._owner._save_state(self._owner._users.get(self.user_id), path)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore state saved by :meth:`save`, before the user's next run."""
        self._owner._load_state(self._owner._users.get(self.user_id), path)

    @property
    def messages(self) -> list[Message]:
        """The messages in this user's window now."""
        state = self._owner._fresh_state(self.user_id)
        return state.memory.primary.get_messages()


class Memory:
    """Agent memory with tiers: global facts, per-user facts, and the session window.

    Use it as ``Agent(memory=Memory(...))``. Every keyword is checked here,
    before any run (see ``docs/how-memory-works.md``):

    - ``location``: where durable facts live: ``"sqlite"`` (default, a local
      file), ``sqlite:///relative.db`` / ``sqlite:////absolute.db``,
      ``postgres://``, ``redis://`` or any FactStore instance.
    - ``user_id``: a string, or a ``(ctx) -> str`` resolver called once per
      run with the run's ``context=``; unresolved callers get global facts only.
    - ``agent_id``: the global tier's id (facts true for everyone using the agent).
    - ``project_id``: a tenant partition applied to every tier.
    - ``window``: recent messages kept per user (default 20).
    - ``learn``: an LLM that extracts durable facts from each user message and
      persists them (confidence 0.6), at most ``max_learned_facts`` per user.
    - ``summarize``: an LLM folding messages that left the window into a summary.
    - ``recall``: ``"auto"`` (the fact store's index, or an in-process one per
      user) or a shared VectorStore (namespaced per user) for semantic recall of
      past exchanges; or a :class:`~fastaiagent.agent.RecallOptions` naming the
      store and tuning recall (``top_k``, ``retrieval``, the ranking weights...).
    - ``dedupe``: drop recalled items an earlier block already injected
      (the same as ``RecallOptions(dedupe=True)``).
    - ``semantic``: ``"auto"`` or a VectorStore: ``retrieve(query, ...)`` by meaning.
    - ``embedder``: the embedder for recall and semantic (default ``"auto"``).
    - ``max_users``: users whose in-process state is kept (LRU; default 10,000).
    - ``plane_agent_id``: also inject a plane's curated facts (the agent's id there).
    - ``plane``: the :class:`~fastaiagent.plane.PlaneConnection` to read them from
      (default None: the process's ``fastaiagent.connect()`` connection).
    - ``max_facts``: facts injected per tier per turn (default 50).
    - ``learn_in_background``: run extraction and summaries after the reply
      (default True); ``flush()`` / ``aflush()`` wait for them.
    - ``fact_policy``: ``(text, source) -> "keep" | "flag" | "drop"``, judging
      each fact ``learn=`` extracts before it is stored (default: drop text
      that reads as instructions to the assistant; see ``docs/blocks.md``).
    - ``window_store``: where windows are kept so that any process can serve any
      user: ``"shared"`` (beside the facts, in the location), a URL or a
      ``WindowStore``; None (default) keeps them in this process. ``window_ttl``:
      how long an idle shared window lives (seconds or a ``timedelta``; default
      a week; None: for ever). See ``docs/production.md``.
    - ``fact_ttl``: how long a fact ``learn=`` extracts holds (seconds or a
      ``timedelta``; default None: until replaced); a stated end ("until
      Friday") wins.
    - ``clock``: ``() -> datetime | UNIX seconds``, the time every read and
      write of this Memory uses (default: the system clock); tests inject one.
    - ``max_memory_tokens``: a token budget for what memory injects each turn
      (facts, summary, recalled messages), packed by priority and score; the
      window is never cut (default None: no budget; see ``docs/semantic.md``).

    Renamed keywords keep working until fastaiagent 2.0
    (:data:`~fastaiagent.agent.deprecation.REMOVED_IN`), with a DeprecationWarning:
    ``windows=`` is ``window_store=`` and ``window_ttl_seconds=`` is ``window_ttl=``
    (one word per idea: ``window`` is the window's size, every ``*_ttl`` a time to live).

    The checked keywords are on :attr:`config`; the fact store made from
    ``location`` is :attr:`location`.
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
        recall: Literal["auto"] | VectorStore | RecallOptions | None = None,
        dedupe: bool = False,
        semantic: Literal["auto"] | VectorStore | None = None,
        embedder: str | Embedder | None = None,
        max_users: int | None = DEFAULT_MAX_USERS,
        plane_agent_id: str | None = None,
        plane: PlaneConnection | None = None,
        max_facts: int = DEFAULT_MAX_FACTS,
        window_store: str | WindowStore | None = None,
        window_ttl: float | timedelta | None = DEFAULT_WINDOW_TTL,
        learn_in_background: bool = True,
        fact_policy: FactPolicy | None = None,
        fact_ttl: float | timedelta | None = None,
        clock: Clock | None = None,
        max_memory_tokens: int | None = None,
        windows: str | WindowStore | None = UNSET,  # deprecated: window_store=
        window_ttl_seconds: float | None = UNSET,  # deprecated: window_ttl=
    ) -> None:
        # Every keyword but location is the config's (the deprecated ones by their new name).
        keywords = dict(locals())
        self.config = MemoryConfig.from_keywords(keywords)
        self._build_parts(location, self.config.user_id, max_users, self.config.window_store)

    def _build_parts(
        self,
        location: str | FactStore,
        user_id: str | UserResolver | None,
        max_users: int | None,
        window_store: str | WindowStore | None,
    ) -> None:
        """The store, stack, user cache, windows and verbs, made from the checked
        :attr:`config`; then this Memory joins its peers on the same store."""
        self.location: FactStore = make_fact_store(location)
        # Writes go through a view that records the writing agent on user facts.
        facts = attributed(self.location, self.config.agent_id)
        self._stack = MemoryStack(self.config, facts)
        self._stack.check_extras()  # a missing extra for what was asked: now, not at a turn
        self._resolution = UserResolution(user_id)
        self._users = UserCache(self.config.per_user, max_users, self._new_state)
        # window_store=None keeps windows in process; else the user cache fronts a shared store.
        self._windows = shared_windows(
            self.config, window_store, self.location, location, self._new_state
        )
        self._verbs = MemoryVerbs(
            self.config,
            facts,
            self._stack,
            forget_user_state=self._forget_user_state,
            flush=self._flush_for_forget,
        )
        self._peer_key = PEERS.key(location, self.location, self.config.project_id)
        PEERS.join(self._peer_key, self)

    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        config = self.config
        return described("Memory", location=self.location, agent_id=config.agent_id,
                         per_user=config.per_user, window=config.window)  # fmt: skip

    @property
    def store(self) -> FactStore:
        """Deprecated: the older name of :attr:`location` (the fact store), with a
        DeprecationWarning; removed in :data:`~fastaiagent.agent.deprecation.REMOVED_IN`."""
        warn_renamed("Memory.store", "Memory.location")
        return self.location

    # -- the direct verbs ------------------------------------------------------

    def persist(
        self,
        text: str,
        tier: str = "user",
        id: str | None = None,
        *,
        confidence: float = 1.0,
        metadata: dict[str, Any] | None = None,
        valid_from: datetime | float | None = None,
        valid_to: datetime | float | None = None,
        ttl: timedelta | float | None = None,
    ) -> int:
        """Store a durable fact in a tier; returns its id (the same id for the same text).

        ``valid_from`` / ``valid_to`` say when the fact holds in the world (a
        datetime, naive read as UTC, or UNIX seconds; None: open-ended); ``ttl``
        (seconds or a timedelta) is shorthand for ``valid_to`` = now + ttl. From
        ``valid_to`` on, the fact is expired: never injected, never returned by
        default. Re-persisting the text of an expired fact records it again."""
        write = FactWrite(confidence, metadata, valid_from, valid_to, ttl)
        return self._verbs.persist(text, tier, id, write)

    def retrieve(
        self,
        query: str | None = None,
        *,
        tier: str = "user",
        id: str | None = None,
        limit: int | None = DEFAULT_PAGE,
        offset: int = 0,
        as_of: datetime | float | None = None,
        include_expired: bool = False,
    ) -> list[Fact]:
        """Active, valid facts of a tier, newest first; with ``query``, the closest by
        meaning (needs ``Memory(semantic=...)``). A user tier with no id returns [].

        ``as_of=`` (a datetime or UNIX seconds) reads what the memory held at that
        moment: facts recorded by then, not yet superseded then, and valid then
        (a fact updated since comes back in its old version).
        ``include_expired=True`` also returns facts whose validity has ended.

        Bounded by default: without ``limit``, at most 50 facts
        (:data:`fastaiagent.facts.store.DEFAULT_LIMIT`; 10 with ``query``).
        Page with ``offset``: ``offset=50`` is the next 50, and so on.
        ``limit=None`` returns every fact, as the stores' ``limit=None`` does (a
        search by meaning takes a number only)."""
        return self._verbs.retrieve(query, tier, id, FactPage(limit, offset, as_of, include_expired))

    def update(
        self,
        new: str,
        *by_position: Any,
        old: int | str | None = None,
        tier: str = "user",
        id: str | None = None,
        confidence: float = 1.0,
        valid_from: datetime | float | None = None,
        valid_to: datetime | float | None = None,
        ttl: timedelta | float | None = None,
    ) -> int:
        """Replace ``old`` (its text or id) with ``new``; the old fact stays as history
        (superseded at the new one's time: ``retrieve(as_of=)`` before it shows it).

        ``update("Prefers Slack", old="Prefers email", tier="user", id="alice")``:
        the new text first, the fact it replaces always named. Returns the new
        fact's id. Updating a fact to its own text changes nothing.
        ``valid_from`` / ``valid_to`` / ``ttl`` are the new version's, as in :meth:`persist`.
        ``old``, ``tier`` and ``id`` by position (``update(new, old)``) still work,
        with a DeprecationWarning until fastaiagent 2.0: two texts in a row read either
        way round.
        """
        old, tier, id = by_name("update", by_position, old=old, tier=tier, id=id)
        write = FactWrite(confidence, None, valid_from, valid_to, ttl)
        return self._verbs.update(new, old, tier, id, write)

    def history(self, fact: int | str, tier: str = "user", id: str | None = None) -> list[Fact]:
        """Every version of a fact (its id, or the text of its active version), newest
        first: each with its text, ``created_at`` / ``superseded_at`` (recorded),
        ``valid_from`` / ``valid_to`` (valid), ``source`` and ``confidence``.
        A fact of another subject returns []."""
        return self._verbs.history(fact, tier, id)

    def expire(
        self,
        fact: int | str,
        tier: str = "user",
        id: str | None = None,
        *,
        at: datetime | float | None = None,
    ) -> bool:
        """End a fact's validity at ``at`` (default: now): from then on it is not
        injected or returned, and stays readable with ``as_of`` / ``history``.
        Returns False when the tier has no such active fact."""
        return self._verbs.expire(fact, tier, id, at=at)

    def forget(
        self,
        tier: str = "user",
        id: str | None = None,
        *,
        fact: str | None = None,
        agent_only: bool = False,
    ) -> int:
        """Hard-delete a subject's facts (history included) or one ``fact``; returns the count.

        Forgetting a user (``tier="user", id="alice"``) removes everything of
        theirs in the location: every fact (they are shared by all agents), the
        stored windows, summaries and block state of *every* agent, the
        in-process windows of every Memory of this process on the same
        location, recall entries, and their runs in the local trace store.

        ``agent_only=True`` (needs ``agent_id``) scopes it to this agent on
        purpose: the user facts this agent's Memory wrote, and this agent's
        window. ``id="*"`` on a Memory with ``agent_id`` is that, for every
        user: other agents' facts and windows stay. Without ``agent_id``,
        ``id="*"`` deletes every user fact of the project. See
        ``docs/how-memory-works.md``. :meth:`forget_user` says how many of each
        kind went.
        """
        return self._verbs.forget(tier, id, fact, agent_only)["facts"]

    def forget_user(self, user_id: str, *, agent_only: bool = False) -> dict[str, int]:
        """``forget(tier="user", id=user_id)``, returning how many of each kind it
        removed: ``facts`` (history included), ``fact_vectors``, ``windows`` (stored
        windows, summaries in them), ``recall`` (recalled messages) and ``traces``
        (the user's runs in the local trace store). What ``fastaiagent memory
        forget --user`` and the Memory page report."""
        if not user_id or user_id == WILDCARD:
            raise InvalidValueError('forget_user() forgets one user: forget_user("alice")')
        return self._verbs.forget("user", user_id, None, agent_only)

    # -- background learning ---------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for background learning (extraction, summaries) queued so far.

        Returns False if ``timeout`` passed first. Queued work is also drained
        at normal interpreter exit, so no learned fact is lost.
        """
        queue = self._stack.queue
        return True if queue is None else bool(queue.flush(timeout))

    def _flush_for_forget(self, user_id: str) -> None:
        # One user: only their queued work, in every Memory of this process (a
        # slow extraction of another user never delays the forget). "*": all.
        if user_id == WILDCARD:
            self.flush()
        else:
            flush_lane_everywhere(user_id)

    async def aflush(self, timeout: float | None = None) -> bool:
        """Async :meth:`flush`; waits without holding the event loop."""
        queue = self._stack.queue
        return True if queue is None else bool(await queue.aflush(timeout))

    def add_history(
        self,
        messages: Sequence[Message],
        *,
        user_id: str | None = None,
        at: Sequence[float | datetime] | None = None,
    ) -> int:
        """Add a past conversation to a user's recall without running the agent
        (importing a chat history): one embedding batch per ``batch_size``
        messages instead of one ``agent.run`` per turn. ``at``: when each message
        was said (epoch seconds or aware datetimes; default now), so questions
        naming a time find them. Nothing is learned and the window is left as it
        is; importing the same messages again adds nothing. ``user_id`` names the
        user (needed with a resolver). Needs ``recall=``. Returns how many
        messages recall did not hold yet (0 for a history imported before)."""
        from fastaiagent.agent.memory_blocks.vector import VectorBlock

        if self.config.recall_options is None:
            raise UsageError("add_history() adds to recall: build the Memory with recall=...")
        checked = None if user_id is None else optional_id("user_id", user_id)
        if self.config.per_user and checked is None:
            raise InvalidValueError("add_history() needs the user's id: add_history(messages, user_id=...)")
        if not self.config.per_user and checked not in (None, self.config.user_id):
            raise InvalidValueError(
                f"this Memory keeps one user's memory ({self.config.user_id!r}), not {checked!r}"
            )
        # One fixed user: theirs, even when add_history is this Memory's first call.
        state = self._users.get(checked if self.config.per_user else self.config.static_user)
        blocks = [block for block in state.own_blocks if isinstance(block, VectorBlock)]
        return sum(block.add_history(messages, at=at) for block in blocks)

    def export_user(self, user_id: str, out: str | os.PathLike[str] | IO[str]) -> Counts:
        """Write everything this location keeps of one user in this Memory's project to
        ``out`` (a path or text stream), as ``fastaiagent memory export --user`` does:
        their facts with history and validity, recalled messages with their vectors,
        every agent's stored window of them (summaries in it) and the items in a
        namespace naming them. A user's "download my data"; :meth:`import_user`
        reads it back, here or in another location. Returns the counts written."""
        from fastaiagent.facts.transfer import export_memory

        if user_id is None or user_id == "" or user_id == WILDCARD:
            raise InvalidValueError('export_user() needs one user\'s id, e.g. mem.export_user("alice", path)')
        checked = identifier("user_id", user_id)
        return export_memory(self.location, out, user_id=checked, project_id=self.config.project_id)

    def import_user(
        self, source: str | os.PathLike[str] | IO[str] | IO[bytes], *, user_id: str | None = None
    ) -> Counts:
        """Add a file written by :meth:`export_user` (or ``fastaiagent memory export
        --user``) to this location; what it already holds is kept, so a repeat adds
        nothing. Recalled messages keep their vectors: nothing is embedded again.
        Facts and recall are read from the store, so the next turn sees them; a
        user's window held in this process stays as it is (the stored one is imported).

        The file is checked whole before anything is written: it must hold one
        user's memory in this Memory's project, and every line must be theirs
        (``user_id``, when given, is the user it must hold: pass it when the file
        comes from the user, e.g. an upload). Its facts keep the library's sources
        only, at most at the confidence each is written with live, pass the size
        limits of live writes, and are judged by this Memory's ``fact_policy``
        (a dropped fact is counted in ``Counts.skipped``). A line outside any of it
        refuses the whole file with :class:`~fastaiagent.errors.InvalidValueError`
        naming the line. See docs/backends.md, "Moving memory between stores"."""
        from fastaiagent.agent.memory_blocks.fact_policy import imported_fact_check
        from fastaiagent.facts.transfer import import_memory

        checked = optional_id("user_id", user_id)
        return import_memory(
            self.location, source, user_id=checked, project_id=self.config.project_id,
            fact_check=imported_fact_check(self.config.fact_policy),
        )  # fmt: skip

    def warm(self) -> None:
        """Check the Memory works and do now what the first turn would otherwise pay
        for: read the fact store once (connection, schema) and, with ``recall=`` or
        ``semantic=``, load the embedding model (2-20 s in a fresh process; an
        embedder without a ``warm()`` method, such as a remote API, is left alone)
        and open the store's vector index. Call it at an application's start to
        fail there: every error is raised (a
        :class:`~fastaiagent.errors.StoreConfigError` for a location configured
        wrong, a :class:`~fastaiagent.errors.StoreUnavailableError` for a store
        that is down, a model that cannot load). ``fastaiagent mcp`` calls it
        before serving."""
        self._stack.warm()

    # -- runs ------------------------------------------------------------------

    def _new_state(self, user_id: str | None) -> UserState:
        own = self._stack.user_blocks(user_id)
        if self._windows is not None:
            own = self._windows.inline_summaries(own)
        memory = ComposableMemory(
            blocks=[*self._stack.shared_blocks(), *own],
            primary=AgentMemory(max_messages=self.config.window),
            max_memory_tokens=self.config.max_memory_tokens,
        )
        return UserState(user_id, memory, own)

    def resolve_user(self, context: Any) -> str | None:
        """The user a run belongs to, or None for an unresolved caller."""
        return self._resolution.resolve(context)

    def start_turn(self, context: Any = None) -> MemoryTurn:
        """Pin a run to its user: resolved once, used for the run's read and write."""
        user = self.resolve_user(context)
        if self.config.per_user and user is None:
            shared = ComposableMemory(
                blocks=self._stack.shared_blocks(),
                primary=AgentMemory(max_messages=1),
                max_memory_tokens=self.config.max_memory_tokens,
            )
            return Turn(None, shared, None)
        state = self._users.get(user)
        return Turn(state, state.memory, self._windows)

    # -- users -----------------------------------------------------------------

    @property
    def cached_users(self) -> list[str]:
        """Users whose windows are held now, least recently used first."""
        return self._users.users()

    def for_user(self, user_id: str) -> UserMemory:
        """One user's window, for save/load outside a run (per-user Memory only)."""
        if not self.config.per_user:
            raise UsageError(
                "for_user() is for a Memory with a user_id resolver; this Memory has one "
                "window: call save()/load() on it directly"
            )
        # An explicit id: "*", blank or missing is an error here, not a warning.
        checked = optional_id("user_id", user_id)
        if checked is None:
            raise InvalidValueError('for_user() needs the user\'s id, e.g. mem.for_user("alice")')
        return UserMemory(self, checked)

    def drop_user(self, user_id: str) -> bool:
        """Drop a user's in-process state (window, summary, recall index), and with
        ``window_store=`` their stored window too, for every worker. Facts stay."""
        identifier("user_id", user_id, allow_empty=True)  # "": the window of a Memory without users
        stored = self._windows.drop(user_id) if self._windows is not None else False
        state = self._users.pop(user_id)
        if state is None:
            return stored
        for block in state.own_blocks:
            try:
                block.clear()
            except Exception as exc:
                logger.warning("memory block %r failed to clear: %s", block.name, exc)
        return True

    def _drop_local(self, user_id: str) -> None:
        """Drop a user's in-process state (not the stored window nor recall entries)."""
        state = self._users.pop(user_id)
        for block in state.own_blocks if state is not None else []:
            try:
                block.clear()
            except Exception as exc:
                logger.warning("memory block %r failed to clear: %s", block.name, exc)

    def _forget_user_state(self, user_id: str, everywhere: bool) -> dict[str, int]:
        """After a user's facts are gone: their windows and caches (``everywhere``:
        every agent's stored windows, every peer Memory, the local trace store);
        returns how many rows of each kind went."""
        if user_id == WILDCARD:
            return self._forget_every_user_state()
        windows = 0
        if self._windows is not None:
            windows += self._windows.drop_everywhere(user_id) if everywhere else int(
                self._windows.drop(user_id)
            )
        if everywhere:  # the location's windows too, whatever this Memory's window_store=
            windows += drop_stored_windows(self.location, self.config.project_id, user_id)
        peers = PEERS.of(self._peer_key) if everywhere else [self]
        stores = [store for memory in peers for store in memory._stack.recall_stores(everywhere)]

        def drop_local() -> None:  # after every recall job is cancelled
            for memory in peers:
                memory._drop_local(user_id)

        recall = self._stack.purge_recall(user_id, stores, before_delete=drop_local)
        traces = trace.forget_user(user_id) if everywhere else 0
        return {"windows": windows, "recall": recall, "traces": traces}

    def _forget_every_user_state(self) -> dict[str, int]:
        # This agent's windows only: other agents' users were not forgotten.
        windows = self._windows.drop_all() if self._windows is not None else 0
        for user in self.cached_users:
            self.drop_user(user)
        if self._users.has_single():
            self.drop_user(self._users.single_user or "")
        if self._stack.shared_recall_store() is not None:
            logger.warning("forget(id='*') cannot enumerate recall namespaces of a shared store")
        return {"windows": windows}

    # -- save / load -----------------------------------------------------------

    def _fresh_state(self, user_id: str | None) -> UserState:
        state = self._users.get(user_id)
        if self._windows is not None:
            self._windows.refresh(state)
        return state

    def _save_state(self, state: UserState, path: str | os.PathLike[str]) -> None:
        if self._windows is not None:
            self._windows.refresh(state)
        state.memory.save(path)

    def _load_state(self, state: UserState, path: str | os.PathLike[str]) -> None:
        state.memory.load(path)
        if self._windows is not None:
            self._windows.push(state)

    def _current_state(self, verb: str) -> UserState:
        if not self.config.per_user:
            return self._users.get(self.config.static_user)
        user = current_user.get()
        if user is None:
            raise UsageError(
                f"{verb}() on a per-user Memory needs a current user, and there is none outside "
                f'a run: use mem.for_user("alice").{verb}(path)'
            )
        return self._users.get(user)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Save the window and block state to the directory ``path``."""
        self._save_state(self._current_state("save"), path)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Load state saved by :meth:`save`."""
        self._load_state(self._current_state("load"), path)


__all__ = ["Memory", "UserMemory"]
