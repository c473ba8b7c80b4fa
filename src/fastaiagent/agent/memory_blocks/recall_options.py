"""RecallOptions: how recall stores, finds and ranks past messages, as one checked value.

``VectorBlock`` grew a keyword for every measured step of recall; the same
settings as one frozen object can be built once, checked once, shared and
passed through ``Memory``::

    from fastaiagent.agent import RecallOptions

    tuned = RecallOptions(top_k=8, retrieval="dense", recency_weight=0.3)
    Memory(user_id=..., recall=tuned)                     # "auto" store, tuned
    Memory(user_id=..., recall=RecallOptions(store=qdrant, top_k=8))
    VectorBlock(store, options=tuned)

The block's keywords still work, and mean the same (``dedupe_against_upstream``
is ``dedupe`` here, the word ``Memory`` uses). ``docs/semantic.md`` says
what each option does, ``docs/research/recall-history.md`` how it was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import tzinfo
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fastaiagent._validate import boolean, fraction, integer, number
from fastaiagent.agent.memory_blocks.base import check_roles
from fastaiagent.agent.memory_blocks.recall_weights import (
    DEFAULT_DATE_BOOST,
    DEFAULT_FOLLOW_TURNS,
    DEFAULT_NEIGHBOUR_WEIGHT,
    DEFAULT_PARTICIPANT_BOOST,
    DEFAULT_REPLY_DROP,
    MAX_FOLLOW_TURNS,
    QUESTION_DROP,
)
from fastaiagent.agent.memory_blocks.scoring import ScoringWeights
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.kb.hybrid import DEFAULT_DENSE_WEIGHT, check_mode  # the weights: recall_weights

if TYPE_CHECKING:
    from fastaiagent.kb.protocols import VectorStore

AUTO: Literal["auto"] = "auto"


def _is_store(value: object) -> bool:
    return not isinstance(value, str) and callable(getattr(value, "search", None))


@dataclass(frozen=True)
class RecallOptions:
    """How recall stores, finds and ranks past messages; checked when made.

    - ``store``: where the messages live: ``"auto"`` (with ``Memory``, the fact
      store's own index, else an in-process FAISS one; a ``VectorBlock`` uses
      the store it is given) or a ``VectorStore`` shared by every user.
    - what is stored: messages of ``roles`` with at least ``min_content_chars``
      characters, embedded ``batch_size`` at a time, each indexed with the
      keywords of the ``context_turns`` messages before it; with ``embed_question``
      (default), a user's message is embedded with the question the message
      before it asks (a turn's recall query too: one text, a little longer).
    - how they are found: ``top_k`` per turn; ``retrieval`` ``"hybrid"``
      (dense and keywords, ``dense_weight`` the dense share), ``"dense"`` or
      ``"bm25"``.
    - how they are ranked: ``recency_weight`` / ``importance_weight`` /
      ``recency_half_life_seconds`` (Memory scoring), ``participant_boost``,
      ``date_boost``, ``reply_drop``, ``follow_turns``, ``question_drop``, ``surroundings`` and
      ``neighbour_weight`` (the steps of ``vector_ranking``); ``tz``: the time zone
      whose days and months a query's dates name ("yesterday", "in May"): an
      IANA name or a tzinfo; None: the clock's, when it returns an aware
      datetime, else UTC.
    - ``dedupe``: drop what an earlier block already injected
      (``VectorBlock(dedupe_against_upstream=)``).
    """

    store: Literal["auto"] | VectorStore = AUTO
    top_k: int = 5
    min_content_chars: int = 10
    roles: tuple[str, ...] = ("user", "assistant")
    batch_size: int = 32
    context_turns: int = 1
    embed_question: bool = True
    retrieval: str = "hybrid"
    dense_weight: float = DEFAULT_DENSE_WEIGHT
    recency_weight: float = 0.0
    importance_weight: float = 0.0
    recency_half_life_seconds: float = 3600.0
    participant_boost: float = DEFAULT_PARTICIPANT_BOOST
    date_boost: float = DEFAULT_DATE_BOOST
    reply_drop: float = DEFAULT_REPLY_DROP
    follow_turns: int = DEFAULT_FOLLOW_TURNS
    question_drop: float = QUESTION_DROP
    surroundings: bool = True
    neighbour_weight: float = DEFAULT_NEIGHBOUR_WEIGHT
    dedupe: bool = False
    tz: str | tzinfo | None = None

    def __post_init__(self) -> None:
        if not _is_store(self.store) and self.store != AUTO:
            raise InvalidTypeError(f'store must be "auto" or a VectorStore, got {self.store!r}')
        integer("top_k", self.top_k, minimum=1)
        integer("min_content_chars", self.min_content_chars, minimum=0)
        integer("batch_size", self.batch_size, minimum=1)
        integer("context_turns", self.context_turns, minimum=0)
        integer("follow_turns", self.follow_turns, minimum=0, maximum=MAX_FOLLOW_TURNS)
        check_mode(self.retrieval)
        boolean("embed_question", self.embed_question)
        boolean("surroundings", self.surroundings)
        boolean("dedupe", self.dedupe)
        self._set("roles", check_roles(self.roles))
        self._set("tz", _zone(self.tz))
        self._set("dense_weight", fraction("dense_weight", self.dense_weight))
        self._set("neighbour_weight", fraction("neighbour_weight", self.neighbour_weight))
        for name in ("participant_boost", "date_boost", "reply_drop", "question_drop"):
            self._set(name, float(number(name, getattr(self, name), minimum=0) or 0))
        self.weights  # noqa: B018 - checks the scoring weights together

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # the checked, normalised value (frozen)

    @property
    def weights(self) -> ScoringWeights:
        """The Memory-scoring weights (recency, importance, half-life), checked together."""
        return ScoringWeights(
            self.recency_weight, self.importance_weight, self.recency_half_life_seconds
        )


def _zone(value: object) -> tzinfo | None:
    """``tz=``: None, a tzinfo, or an IANA name ("Europe/Lisbon")."""
    if value is None or isinstance(value, tzinfo):
        return value
    if not isinstance(value, str):
        raise InvalidTypeError(f'tz must be a time zone name ("Europe/Lisbon") or a tzinfo, got {value!r}')
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidValueError(f"tz={value!r} is not a time zone this machine knows: {exc}") from exc


OPTION_NAMES = frozenset(f.name for f in fields(RecallOptions))

__all__ = [
    "DEFAULT_DATE_BOOST",
    "DEFAULT_FOLLOW_TURNS",
    "DEFAULT_NEIGHBOUR_WEIGHT",
    "DEFAULT_PARTICIPANT_BOOST",
    "DEFAULT_REPLY_DROP",
    "OPTION_NAMES",
    "RecallOptions",
]
