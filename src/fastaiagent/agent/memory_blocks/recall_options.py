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
is ``dedupe`` here, the word ``Memory`` uses). A new option is one field here:
``VectorBlock`` takes every field as a keyword and reads it back from this value.
``docs/semantic.md`` says what each option does, ``docs/research/recall-history.md``
how it was measured; the weights behind ``cues`` are in :mod:`fastaiagent.recall.weights`.
"""

from __future__ import annotations

import warnings
from dataclasses import InitVar, dataclass, field, fields
from datetime import tzinfo
from typing import TYPE_CHECKING, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fastaiagent._validate import boolean, fraction, integer, number
from fastaiagent.agent.deprecation import REMOVED_IN, UNSET
from fastaiagent.agent.memory_blocks.base import check_roles
from fastaiagent.agent.memory_blocks.scoring import ScoringWeights
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.kb.hybrid import check_mode
from fastaiagent.recall.weights import DEFAULT_DENSE_WEIGHT, MAX_FOLLOW_TURNS, SIGNALS, Ranking

if TYPE_CHECKING:
    from fastaiagent.kb.protocols import VectorStore

AUTO: Literal["auto"] = "auto"


def _is_store(value: object) -> bool:
    return not isinstance(value, str) and callable(getattr(value, "search", None))


# The ranking knobs removed in favour of ``cues`` (one switch): still accepted until
# REMOVED_IN, with a DeprecationWarning, and mapped onto that step's weight. Their
# values were all measured together as "the default"; a single one off is an
# experiment (``VectorBlock.ranking``, :class:`~fastaiagent.recall.weights.Ranking`).
REMOVED = {
    "participant_boost": "participant", "date_boost": "date", "reply_drop": "reply_drop",
    "question_drop": "question_drop", "follow_turns": "follow_turns", "surroundings": "signals",
    "neighbour_weight": None, "embed_question": None,  # measured worse / always on now
}  # fmt: skip


@dataclass(frozen=True)
class RecallOptions:
    """How recall stores, finds and ranks past messages; checked when made.

    - ``store``: where the messages live: ``"auto"`` (with ``Memory``, the fact
      store's own index, else an in-process FAISS one; a ``VectorBlock`` uses
      the store it is given) or a ``VectorStore`` shared by every user.
    - what is stored: messages of ``roles`` with at least ``min_content_chars``
      characters, embedded ``batch_size`` at a time, each indexed with the
      keywords of the ``context_turns`` messages before it; a user's message is
      embedded with the question the message before it asks (a turn's recall
      query too: one text, a little longer).
    - how they are ranked, six options: ``retrieval`` ``"hybrid"`` (dense and
      keywords, ``dense_weight`` the dense share), ``"dense"`` or ``"bm25"``;
      ``cues`` (the query's cues and the candidates' surroundings,
      :mod:`fastaiagent.recall.ranking`; False: fusion alone);
      ``recency_weight`` / ``importance_weight`` / ``recency_half_life_seconds``
      (Memory scoring). ``tz``: the time zone whose days and months a query's
      dates name ("yesterday", "in May"): an IANA name or a tzinfo; None: the
      clock's, when it returns an aware datetime, else UTC.
    - ``dedupe``: drop what an earlier block already injected
      (``VectorBlock(dedupe_against_upstream=)``).

    ``participant_boost``, ``date_boost``, ``reply_drop``, ``question_drop``,
    ``follow_turns``, ``surroundings``, ``neighbour_weight`` and ``embed_question``
    are deprecated (removed in fastaiagent 2.0, :data:`REMOVED`).
    """

    store: Literal["auto"] | VectorStore = AUTO
    top_k: int = 5
    min_content_chars: int = 10
    roles: tuple[str, ...] = ("user", "assistant")
    batch_size: int = 32
    context_turns: int = 1
    retrieval: str = "hybrid"
    dense_weight: float = DEFAULT_DENSE_WEIGHT
    cues: bool = True
    recency_weight: float = 0.0
    importance_weight: float = 0.0
    recency_half_life_seconds: float = 3600.0
    dedupe: bool = False
    tz: str | tzinfo | None = None
    # What the deprecated keywords mapped to (kept by dataclasses.replace).
    removed: tuple[tuple[str, Any], ...] = field(default=(), repr=False)
    participant_boost: InitVar[Any] = UNSET
    date_boost: InitVar[Any] = UNSET
    reply_drop: InitVar[Any] = UNSET
    question_drop: InitVar[Any] = UNSET
    follow_turns: InitVar[Any] = UNSET
    surroundings: InitVar[Any] = UNSET
    neighbour_weight: InitVar[Any] = UNSET
    embed_question: InitVar[Any] = UNSET

    def __post_init__(self, *old: Any) -> None:
        if not _is_store(self.store) and self.store != AUTO:
            raise InvalidTypeError(f'store must be "auto" or a VectorStore, got {self.store!r}')
        integer("top_k", self.top_k, minimum=1)
        integer("min_content_chars", self.min_content_chars, minimum=0)
        integer("batch_size", self.batch_size, minimum=1)
        integer("context_turns", self.context_turns, minimum=0)
        check_mode(self.retrieval)
        boolean("cues", self.cues)
        boolean("dedupe", self.dedupe)
        self._set("roles", check_roles(self.roles))
        self._set("tz", _zone(self.tz))
        self._set("dense_weight", fraction("dense_weight", self.dense_weight))
        given = {name: value for name, value in zip(REMOVED, old, strict=True) if value is not UNSET}
        if given:
            warnings.warn(
                f"RecallOptions({', '.join(f'{k}=' for k in given)}) is deprecated: use "
                f"RecallOptions(cues=True|False) (removed in fastaiagent {REMOVED_IN})",
                DeprecationWarning,
                stacklevel=4,
            )
            self._set("removed", tuple({**dict(self.removed), **_checked(given)}.items()))
        self.weights  # noqa: B018 - checks the scoring weights together

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # the checked, normalised value (frozen)

    @property
    def weights(self) -> ScoringWeights:
        """The Memory-scoring weights (recency, importance, half-life), checked together."""
        return ScoringWeights(
            self.recency_weight, self.importance_weight, self.recency_half_life_seconds
        )

    @property
    def ranking(self) -> Ranking:
        """The ranking steps' weights: the defaults with ``cues``, every cue off without;
        a deprecated keyword given sets its step's weight."""
        base = Ranking() if self.cues else Ranking.off()
        mapped: dict[str, Any] = {step: v for k, v in self.removed if (step := REMOVED[k]) is not None}
        if "signals" in mapped:
            mapped["signals"] = SIGNALS if mapped["signals"] else None
        return base.with_(**mapped) if mapped else base


def _checked(given: dict[str, Any]) -> dict[str, Any]:
    """The deprecated keywords' values, checked as they were (a bad one is still an error)."""
    out = dict(given)
    for name in ("participant_boost", "date_boost", "reply_drop", "question_drop"):
        if name in out:
            out[name] = float(number(name, out[name], minimum=0) or 0)
    if "follow_turns" in out:
        integer("follow_turns", out["follow_turns"], minimum=0, maximum=MAX_FOLLOW_TURNS)
    for name in ("surroundings", "embed_question"):
        if name in out:
            boolean(name, out[name])
    if "neighbour_weight" in out:
        fraction("neighbour_weight", out["neighbour_weight"])
    return out


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


OPTION_NAMES = frozenset(f.name for f in fields(RecallOptions)) - {"removed"}

__all__ = ["OPTION_NAMES", "REMOVED", "RecallOptions"]
