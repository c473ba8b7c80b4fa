"""MemoryStack: which blocks a Memory composes for each user, in prompt order.

Global facts, plane facts (shared by every caller), then the user's own:
user facts, summary, recall, learning. It also owns what those blocks share
and make on first use: the embedder, the background queue, the semantic index.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from fastaiagent._optional import installed
from fastaiagent.agent.memory_blocks.background import AfterReplyBlock, BackgroundQueue
from fastaiagent.agent.memory_blocks.base import MemoryBlock
from fastaiagent.agent.memory_blocks.persistent import PersistentFactBlock
from fastaiagent.agent.memory_blocks.recall_options import AUTO
from fastaiagent.agent.memory_config import MemoryConfig
from fastaiagent.errors import MissingExtraError, StoreUnavailableError, UsageError
from fastaiagent.facts.fact import LEARNED_CONFIDENCE
from fastaiagent.facts.index.reembed import carry_over, stop_background_job
from fastaiagent.facts.scoping import WILDCARD
from fastaiagent.facts.store import FactStore
from fastaiagent.facts.vectors import every_vector_index, recall_namespace

logger = logging.getLogger("fastaiagent.memory")

GLOBAL_HEADING = "Facts true for everyone using this agent:"
USER_HEADING = "Facts about this user:"


class MemoryStack:
    """Builds a Memory's blocks from its config. What the config asks for is
    checked at construction (:meth:`check_extras`); a block that cannot start
    because its store is down is logged and left out (an outage degrades memory,
    never the run); any other failure to build one is raised."""

    def __init__(self, config: MemoryConfig, store: FactStore) -> None:
        self.config = config
        self.store = store
        self._lock = threading.RLock()
        self._shared: list[MemoryBlock] | None = None
        self._embedder: Any = None
        self._semantic_index: Any = None
        self._vector_index: Any = None
        self._vector_index_checked = False
        self.queue: BackgroundQueue | None = None

    def check_extras(self) -> None:
        """Raise :class:`~fastaiagent.errors.MissingExtraError` now for an extra that
        what this Memory was asked to do needs: the embedder of ``recall=`` /
        ``semantic=``, and for ``"auto"`` the store's vector index (numpy) or, for a
        store that keeps no vectors, the in-process FAISS index ``"auto"`` means
        there. Nothing is loaded or connected: the model loads at the first turn
        (or :meth:`warm`), the index opens at its first use."""
        options, semantic = self.config.recall_options, self.config.semantic
        if options is None and semantic is None:
            return
        self.embedder()
        if (options is not None and options.store == AUTO) or semantic == AUTO:
            make = getattr(self.store, "vector_store", None)
            if callable(make):
                make()  # the index object only: its first use reads the database
            else:
                installed("faiss", "faiss")

    # -- blocks ----------------------------------------------------------------

    @staticmethod
    def _build(label: str, factory: Callable[[], MemoryBlock]) -> MemoryBlock | None:
        try:
            return factory()
        except StoreUnavailableError as exc:  # an outage degrades memory, not the run
            logger.warning("memory block %s could not be built; running without it: %s", label, exc)
            return None

    def shared_blocks(self) -> list[MemoryBlock]:
        """Blocks every caller sees, resolved or not: global facts, then plane facts."""
        with self._lock:
            if self._shared is None:
                built = []
                if self.config.agent_id:
                    built.append(self._build("global facts", self._global_facts))
                if self.config.plane_agent_id:
                    built.append(self._build("plane facts", self._plane_facts))
                self._shared = [b for b in built if b is not None]
            return self._shared

    def user_blocks(self, user_id: str | None) -> list[MemoryBlock]:
        """One user's own blocks in prompt order: user facts, summary, recall, learning."""
        config = self.config
        builders: list[tuple[str, Callable[[], MemoryBlock]]] = []
        if user_id is not None:
            builders.append(("user facts", lambda: self._user_facts(user_id)))
        if config.summarize is not None:
            builders.append(("summary", lambda: self._after_reply(self._summary())))
        if config.recall_options is not None:
            builders.append(("recall", lambda: self._recall(user_id)))
        if config.learn is not None and user_id is not None:
            builders.append(("learn", lambda: self._after_reply(self._learning(user_id))))
        built = [self._build(label, factory) for label, factory in builders]
        return [b for b in built if b is not None]

    def _facts_block(self, scope: str, scope_id: str, heading: str, name: str) -> MemoryBlock:
        return PersistentFactBlock(
            scope=scope,
            scope_id=scope_id,
            project_id=self.config.project_id,
            max_facts=self.config.max_facts,
            store=self.store,
            heading=heading,
            name=name,
            clock=self.config.clock,
        )

    def _global_facts(self) -> MemoryBlock:
        agent = self.config.agent_id or WILDCARD
        return self._facts_block("agent", agent, GLOBAL_HEADING, "persistent_facts")

    def _user_facts(self, user_id: str) -> MemoryBlock:
        return self._facts_block("user", user_id, USER_HEADING, "persistent_facts.user")

    def _plane_facts(self) -> MemoryBlock:
        from fastaiagent.agent.memory_blocks.plane import PlaneFactBlock

        return PlaneFactBlock(agent_id=self.config.plane_agent_id or "", plane=self.config.plane)

    def _summary(self) -> MemoryBlock:
        from fastaiagent.agent.memory_blocks.summary import SummaryBlock

        # The summary covers what left the window, never what is still in it.
        assert self.config.summarize is not None
        return SummaryBlock(llm=self.config.summarize, keep_last=self.config.window)

    def _recall(self, user_id: str | None) -> MemoryBlock:
        from fastaiagent.agent.memory_blocks.vector import VectorBlock

        options = self.config.recall_options
        assert options is not None
        embedder = self.embedder()
        store = self.shared_recall_store()
        namespace = self.recall_namespace(user_id)
        if store is None:
            from fastaiagent.kb.backends.faiss import FaissVectorStore

            store = FaissVectorStore(dimension=embedder.dimension)
        elif options.store == AUTO:  # the fact store's index of the embedder's size
            self._carry_over(store, namespace)
        return VectorBlock(store, embedder, namespace=namespace, clock=self.config.clock, options=options)

    def _carry_over(self, index: Any, namespace: str) -> None:
        """A user new to this embedder's size whose messages the store holds at another
        size (the agent's embedder changed): re-embed them in the background."""
        try:
            carry_over(index, self.stored_indexes, self.embedder(), namespace)
        except Exception as exc:  # recall answers from what the index holds; the run goes on
            logger.warning("recall of %r could not re-embed its older messages: %s", namespace, exc)

    def _learning(self, user_id: str) -> MemoryBlock:
        from fastaiagent.agent.memory_blocks.facts import FactExtractionBlock

        assert self.config.learn is not None
        return FactExtractionBlock(
            llm=self.config.learn,
            roles=("user",),
            inject=False,  # the user fact block injects them, once
            persist=True,
            scope="user",
            scope_id=user_id,
            project_id=self.config.project_id,
            confidence=LEARNED_CONFIDENCE,
            max_persisted=self.config.max_learned_facts,
            store=self.store,
            fact_policy=self.config.fact_policy,
            ttl=self.config.fact_ttl,
            clock=self.config.clock,
        )

    def _after_reply(self, block: MemoryBlock) -> MemoryBlock:
        if not self.config.learn_in_background:
            return block
        with self._lock:
            if self.queue is None:
                self.queue = BackgroundQueue(name="fastaiagent-memory-learning")
        return AfterReplyBlock(block, self.queue)

    # -- what the blocks share -------------------------------------------------

    def recall_namespace(self, user_id: str | None) -> str:
        """``user:<id>`` (``<project>:user:<id>`` with a project); ``default`` without a user."""
        return "default" if user_id is None else recall_namespace(self.config.project_id, user_id)

    def warm(self) -> None:
        """See :meth:`fastaiagent.agent.memory.Memory.warm`."""
        self.store.get(1)
        options, semantic = self.config.recall_options, self.config.semantic
        if options is None and semantic is None:
            return
        warm = getattr(self.embedder(), "warm", None)
        if callable(warm):
            warm()
        if (options is not None and options.store == AUTO) or semantic == AUTO:
            self.vector_index()  # opens it at the embedder's size: its schema, its size

    def embedder(self) -> Any:
        """The embedder shared by recall and semantic retrieval, made on first use."""
        with self._lock:
            if self._embedder is None:
                from fastaiagent.kb.embedding import get_embedder

                self._embedder = get_embedder(self.config.embedder or "auto")
            return self._embedder

    def vector_index(self) -> Any:
        """The fact store's own vector index (:class:`~fastaiagent.facts.vectors.HoldsVectors`)
        of the embedder's size, which ``"auto"`` recall and semantic facts use so they
        outlive the process; None when the store keeps no vectors (``"auto"`` is then
        an in-process FAISS index, as documented). Agents whose embedders differ in
        size share the store: each size has an index of its own.

        An index that fails to open raises (never an in-process index in its place:
        its entries would die with the process and a forget elsewhere would miss
        them); the next call tries again."""
        with self._lock:
            if not self._vector_index_checked:
                make = getattr(self.store, "vector_store", None)
                if callable(make):
                    self._vector_index = self._open_vector_index(make)
                self._vector_index_checked = True
            return self._vector_index

    def _open_vector_index(self, make: Callable[..., Any]) -> Any:
        if "dimension" not in inspect.signature(make).parameters:
            return make()  # a store of one size (a HoldsVectors of a user's own)
        return make(dimension=int(self.embedder().dimension))

    def stored_indexes(self) -> list[Any]:
        """Every size's index of the fact store, read from the database (another agent's
        or an earlier embedder's sizes too), with no embedder: what a forget empties.
        Empty without vector support (no index can exist, so none holds anything)."""
        try:
            return every_vector_index(self.store)
        except MissingExtraError:
            return []

    def shared_recall_store(self) -> Any:
        """The store holding every user's recall entries (a VectorStore passed as
        ``recall=``, or the fact store's index for ``"auto"``), None when in-process."""
        options = self.config.recall_options
        if options is None:
            return None
        return self.vector_index() if options.store == AUTO else options.store

    def purge_recall(
        self, user_id: str, stores: Iterable[Any], before_delete: Callable[[], object] | None = None
    ) -> int:
        """Delete a user's recall entries from ``stores`` (each once: several Memory
        peers name the same store), and from every size's index of the fact store
        when one of them is among them; returns how many there were.

        Every re-embedding job writing the user's entries to one of them is
        cancelled first (no job reads a half-emptied source or writes back into an
        emptied index). The entries are deleted and counted, then ``before_delete``
        runs (a forget empties the blocks' own indexes and queues there), then what
        a turn wrote in between is deleted too.
        Two store objects on one table count its entries once (the second delete
        finds none)."""
        namespace, purges = self.recall_namespace(user_id), self._recall_purges(stores)
        for store in purges:
            stop_background_job(store, namespace)
        deleted = sum(int(store.delete_namespace(namespace) or 0) for store in purges)
        if before_delete is not None:
            before_delete()
        for store in purges:  # what a turn wrote meanwhile (a read first: usually nothing)
            if int(store.count(namespace)):
                deleted += int(store.delete_namespace(namespace) or 0)
        return deleted

    def _recall_purges(self, stores: Iterable[Any]) -> list[Any]:
        """``stores`` that can delete a namespace, each once, plus every size's index
        of the fact store when one of them is among them."""
        found = {id(store): store for store in stores}
        if any(getattr(store, "store", None) is self.store for store in found.values()):
            found.update((id(index), index) for index in self.stored_indexes())
        return [s for s in found.values() if callable(getattr(s, "delete_namespace", None))]

    def semantic_index(self) -> Any:
        """The semantic fact index (``semantic=``), made on first use."""
        with self._lock:
            if self._semantic_index is None:
                from fastaiagent.facts.semantic import SemanticFactIndex

                vectors = self.config.semantic
                if vectors is None:  # the verbs ask for the index only with semantic=
                    raise UsageError("the semantic index needs Memory(semantic=...)")
                if vectors == AUTO:
                    vectors = self.vector_index() or AUTO
                self._semantic_index = SemanticFactIndex(self.store, vectors, self.embedder())
            return self._semantic_index

    def fact_indexes(self) -> list[Any]:
        """Every semantic index that may hold this store's fact vectors, for a forget:
        the one this Memory built, and one over the store's own durable vectors
        (another process's ``semantic="auto"`` wrote there), made without an
        embedder since deleting needs none."""
        from fastaiagent.facts.semantic import SemanticFactIndex

        built = self.semantic_index_if_built
        found = [built] if built is not None else []
        for durable in self.stored_indexes():  # every size: an earlier embedder's too
            if built is None or built.vectors_if_made is not durable:
                found.append(SemanticFactIndex(self.store, durable))
        custom = self.config.semantic
        if built is None and custom not in (None, AUTO):
            found.append(SemanticFactIndex(self.store, custom))
        return found

    def recall_stores(self, everywhere: bool = True) -> list[Any]:
        """The stores that may hold this project's recall entries: a VectorStore passed
        as ``recall=``, and (``everywhere`` or ``recall="auto"``) every size's index of
        the fact store, which ``recall="auto"`` of any process writes to. Needs no
        embedder: a forget must not load a model."""
        options = self.config.recall_options
        auto = options is not None and options.store == AUTO
        found = [options.store] if options is not None and not auto else []
        return found + (self.stored_indexes() if everywhere or auto else [])

    @property
    def semantic_index_if_built(self) -> Any:
        """The semantic index when something has used it, else None (nothing to update)."""
        return self._semantic_index
