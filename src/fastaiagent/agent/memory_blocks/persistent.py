"""PersistentFactBlock: durable facts from a FactStore, injected every turn."""

from __future__ import annotations

import threading
import warnings

from fastaiagent import trace
from fastaiagent._validate import one_of, positive_int, text
from fastaiagent.agent.memory_blocks.base import MemoryBlock
from fastaiagent.agent.memory_blocks.scoring import Scored, ScoringWeights, rank
from fastaiagent.errors import InvalidTypeError
from fastaiagent.facts.fact import SCOPES, Fact
from fastaiagent.facts.store import FactStore
from fastaiagent.llm.message import Message, SystemMessage

DEFAULT_HEADING = "Known facts:"


def format_facts(heading: str, facts: list[Fact]) -> str:
    return heading + "\n" + "\n".join(f"- {fact.fact}" for fact in facts)


class PersistentFactBlock(MemoryBlock):
    """Reads a subject's active facts (newest first, at most ``max_facts``) each turn.

    ``scope`` is ``user``, ``project`` or ``agent``; ``scope_id="*"`` reads
    every subject of the scope. ``store`` defaults to the local SQLite store.
    With ``recency_weight``/``importance_weight`` > 0 the facts are re-ranked
    (importance is the fact's ``confidence``); with both at zero the store's
    newest-first order is kept as is.
    """

    name = "persistent_facts"

    def __init__(
        self,
        scope: str = "agent",
        scope_id: str = "",
        project_id: str = "",
        max_facts: int = 50,
        refresh_every: int = 1,
        recency_weight: float = 0.0,
        importance_weight: float = 0.0,
        recency_half_life_seconds: float = 86400.0,
        *,
        store: FactStore | None = None,
        heading: str = DEFAULT_HEADING,
        name: str | None = None,
    ) -> None:
        one_of("scope", scope, SCOPES)
        text("scope_id", scope_id, allow_empty=True)
        text("project_id", project_id, allow_empty=True)
        positive_int("max_facts", max_facts)
        positive_int("refresh_every", refresh_every)
        text("heading", heading)
        if name is not None:
            text("name", name)
        if store is not None and not callable(getattr(store, "list_active", None)):
            raise InvalidTypeError(
                f"store must be a FactStore (e.g. SQLiteFactStore()), got {type(store).__name__}"
            )
        if scope == "agent" and scope_id == "":
            warnings.warn(
                'PersistentFactBlock(scope="agent", scope_id="") reads every agent\'s facts; '
                'pass the agent id, or scope_id="*" to read them all on purpose',
                UserWarning,
                stacklevel=2,
            )
        self.scope = scope
        self.scope_id = scope_id
        self.project_id = project_id
        self.max_facts = max_facts
        self.refresh_every = refresh_every
        self.weights = ScoringWeights(recency_weight, importance_weight, recency_half_life_seconds)
        self.heading = heading
        if name is not None:
            self.name = name
        self._store = store
        self._cache: list[Fact] = []
        self._renders = 0
        self._lock = threading.Lock()

    @property
    def store(self) -> FactStore:
        if self._store is None:
            from fastaiagent.facts.sqlite import SQLiteFactStore

            self._store = SQLiteFactStore()
        return self._store

    def fetch(self) -> list[Fact]:
        """The facts this block injects now (refreshing per ``refresh_every``)."""
        with self._lock:
            due = self._renders % self.refresh_every == 0
            self._renders += 1
        if due:
            facts = self.store.list_active(self.scope, self.scope_id, self.project_id, self.max_facts)
            if self.weights.active:
                scored = [Scored(f, 1.0, f.created_at, float(f.confidence)) for f in facts]
                facts = [s.item for s in rank(scored, self.weights)]
            if self.refresh_every > 1:  # only a block that serves renders from cache keeps one
                self._cache = facts
            return facts
        return self._cache

    def render(self, query: str) -> list[Message]:
        facts = self.fetch()
        if not facts:
            return []
        if trace.is_enabled():
            trace.annotate({"memory.scope": self.scope, "memory.fact_ids": [f.id or 0 for f in facts]})
        return [SystemMessage(format_facts(self.heading, facts))]

    def clear(self) -> None:
        with self._lock:
            self._cache = []
            self._renders = 0

