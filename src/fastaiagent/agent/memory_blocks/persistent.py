"""PersistentFactBlock: durable facts from a FactStore, injected every turn."""

from __future__ import annotations

import threading
import time
import warnings

from fastaiagent import trace
from fastaiagent._validate import one_of, positive_int, text
from fastaiagent.agent.memory_blocks import framing
from fastaiagent.agent.memory_blocks.base import MemoryBlock
from fastaiagent.agent.memory_blocks.fact_policy import FLAGGED_KEY
from fastaiagent.agent.memory_blocks.scoring import Scored, ScoringWeights, rank
from fastaiagent.errors import InvalidTypeError
from fastaiagent.facts.fact import SCOPES, SOURCE_CONVERSATION, SOURCE_MANUAL, SOURCE_TRACES, Fact
from fastaiagent.facts.store import FactStore
from fastaiagent.facts.validity import Clock, check_clock, read_clock
from fastaiagent.llm.message import Message, SystemMessage

DEFAULT_HEADING = "Known facts:"

# What the model is told about where a fact came from: its source name, the
# same word the CLI and the Memory page show (the section heading says the tier).
_LABELS = {
    SOURCE_CONVERSATION: framing.LEARNED,
    SOURCE_TRACES: framing.TRACES,
    SOURCE_MANUAL: framing.MANUAL,
    "": framing.MANUAL,
}
# scope -> source -> confidence -> ' (label, confidence)': format_facts runs
# every turn, and three dict lookups per fact cost less than formatting one.
_suffixes: dict[str, dict[str, dict[float, str]]] = {}
_MAX_SUFFIXES = 4096  # a handful of distinct combinations in practice


def source_label(fact: Fact) -> str:
    """``manual`` / ``learned`` / ``traces`` (the fact's source name), or a custom
    source name when it is one short plain word (else ``other``)."""
    label = _LABELS.get(fact.source)
    if label is not None:
        return label
    source = fact.source
    plain = len(source) <= 32 and source.replace("_", "").replace("-", "").isalnum()
    return source if plain else "other"


def _suffix(fact: Fact) -> str:
    suffix = f" ({framing.provenance(source_label(fact), fact.confidence)})"
    by_confidence = _suffixes.setdefault(fact.scope, {}).setdefault(fact.source, {})
    if len(by_confidence) < _MAX_SUFFIXES:
        by_confidence[fact.confidence] = suffix
    return suffix


def shown(facts: list[Fact]) -> list[Fact]:
    """``facts`` without those a fact policy flagged (stored, never injected)."""
    return [f for f in facts if not (f.metadata and f.metadata.get(FLAGGED_KEY))]


def fact_lines(facts: list[Fact], scope: str | None = None) -> list[str]:
    """One line per fact not flagged: ``- "Prefers email" (learned, 0.6)``
    (quoted and escaped). ``scope``: the one scope every fact is filed under,
    when the caller knows it (a block does); it allows the fast path."""
    # This runs every turn for every tier: the common case (nothing flagged,
    # nothing to escape, labels seen before) is one pass and two dict lookups
    # per fact; anything else takes the careful path below. (Most facts have
    # metadata: a Memory with an agent id stamps its writes.)
    texts = [f.fact for f in facts if not (f.metadata and f.metadata.get(FLAGGED_KEY))]
    table = None if scope is None else _suffixes.get(scope)
    if table is not None and len(texts) == len(facts) and framing.all_plain(texts):
        try:
            return [f'- "{f.fact}"{table[f.source][f.confidence]}' for f in facts]
        except KeyError:
            pass  # a label not seen yet: the line below remembers it
    return ["- " + framing.quote(f.fact) + _suffix(f) for f in shown(facts)]


def format_facts(heading: str, facts: list[Fact], scope: str | None = None) -> str:
    """``heading``, the notes preamble, then one quoted fact per line with its
    source and confidence (see :func:`fact_lines`)."""
    return framing.section(heading, fact_lines(facts, scope))


class PersistentFactBlock(MemoryBlock):
    """Reads a subject's active facts (newest first, at most ``max_facts``) each turn.

    ``scope`` is ``user``, ``project`` or ``agent``; ``scope_id="*"`` reads
    every subject of the scope. ``store`` defaults to the local SQLite store.
    With ``recency_weight``/``importance_weight`` > 0 the facts are re-ranked
    (importance is the fact's ``confidence``); with both at zero the store's
    newest-first order is kept as is.

    The facts are rendered as quoted data under ``heading`` and a one-line
    preamble, each with its source and confidence (see :func:`fact_lines`);
    facts a fact policy flagged are never injected.
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
        clock: Clock | None = None,
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
        check_clock(clock)
        self.clock = clock
        self._store = store
        self._cache: list[Fact] = []
        self._renders = 0
        self._lock = threading.Lock()

    @property
    def store(self) -> FactStore:
        if self._store is None:
            from fastaiagent.facts.sqlite.store import SQLiteFactStore

            self._store = SQLiteFactStore()
        return self._store

    def fetch(self) -> list[Fact]:
        """The facts this block injects now (refreshing per ``refresh_every``)."""
        with self._lock:
            due = self._renders % self.refresh_every == 0
            self._renders += 1
        if due:
            if self.clock is None:  # the store's own "now"; the per-turn read as it was
                facts = self.store.list_active(
                    self.scope, self.scope_id, self.project_id, self.max_facts
                )
            else:
                now = read_clock(self.clock)
                facts = self.store.list_active(
                    self.scope, self.scope_id, self.project_id, self.max_facts, now=now
                )
            if self.weights.active:
                scored = [Scored(f, 1.0, f.created_at, float(f.confidence)) for f in facts]
                facts = [s.item for s in rank(scored, self.weights)]
            if self.refresh_every > 1:  # only a block that serves renders from cache keeps one
                self._cache = facts
            return facts
        # A fact cached at the last refresh may have expired since.
        now = time.time() if self.clock is None else read_clock(self.clock)
        return [f for f in self._cache if f.valid_to is None or f.valid_to > now]

    def render(self, query: str) -> list[Message]:
        facts = self.fetch()
        lines = fact_lines(facts, self.scope)
        if not lines:
            return []
        if trace.is_enabled():
            if len(lines) != len(facts):
                facts = shown(facts)
            trace.annotate(
                {"memory.scope": self.scope, "memory.fact_ids": [f.id or 0 for f in facts]}
            )
        return [SystemMessage(framing.section(self.heading, lines))]

    def clear(self) -> None:
        with self._lock:
            self._cache = []
            self._renders = 0
