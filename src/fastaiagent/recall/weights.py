"""Every weight recall ranks with, in one place.

How each was measured is in docs/research/recall-history.md and the experiment
log in bench/README.md. The weights are in standard deviations of the fused
score (the dense and keyword sides are standardised and blended first), so they
add up on one scale. Fitted weights were fitted on LoCoMo conversations 0-2 and
confirmed on 3-4; "not fitted" ones were set once and kept where they did no
harm on everyday conversations (bench/everyday_recall.py).

:class:`Ranking` holds the weights of the ranking steps (:mod:`.ranking`);
``RecallOptions(cues=False)`` ranks with :meth:`Ranking.off`. A new weight is
one field of :class:`Ranking` (with its default and comment): nothing else.
The BM25 constants (k1 1.2, b 0.75) live with the analyzer in
:mod:`fastaiagent.kb.bm25` because every store's postings score with them;
they are re-exported here so every number recall uses can be read in one file.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from fastaiagent.kb.bm25 import K1 as BM25_K1  # BM25's constants: the analyzer's
from fastaiagent.kb.bm25 import B as BM25_B
from fastaiagent.kb.hybrid import DEFAULT_DENSE_WEIGHT  # the dense side's share of the blend

# -- the searches (candidates) ---------------------------------------------------------
# Candidates per wanted item from each side, before window and dedupe filtering.
# 8 measured a little better on LoCoMo (bench/README.md) but cost about 1 ms more CPU
# per recall over 10k messages: a recall stays as cheap as before.
FETCH_FACTOR = 4
# The time-listed search fetches this share of the dense side's candidates: the same
# within noise on LoCoMo, for half the chunk reads.
RECORDED_SHARE = 0.5
# A month named without a year ("in May") is looked for in this many years up to now.
YEARS_BACK = 30
# Said over an hour after a hit: a later conversation. Not fitted: 30 minutes to 6 hours
# measure the same on both benchmarks (LoCoMo's sessions are days apart).
SAME_CONVERSATION_SECONDS = 3600.0
MAX_FOLLOW_TURNS = 3  # each turn is one store read


# -- the surroundings of a candidate (context) ------------------------------------------
class Signals(NamedTuple):
    """A candidate's signals, or the weight of each (in standard deviations of
    the fused score per unit of the signal)."""

    length: float
    neighbour: float
    conversation: float
    by_meaning: float
    speaker: float
    asks: float


# Fitted together (a pairwise logistic regression on conversations 0-2): dropping the
# speaker or asks weight, which look like doubles of the participant boost and the
# question drop, loses on both LoCoMo and the everyday bench. A seventh signal, found
# by the time-listed search, was removed: it put the default below every cue off on
# the fresh set's team chat and did nothing measurable on LoCoMo (bench/README.md).
SIGNALS = Signals(
    length=0.0,  # fitted positive on LoCoMo; off: long replies crowded out short statements
    neighbour=0.30,
    conversation=0.14,
    by_meaning=0.42,
    speaker=1.39,
    asks=-0.24,
)


@dataclass(frozen=True)
class Ranking:
    """The weights of the ranking steps; 0 (or None) turns a step off."""

    # The speaker a query names: their messages gain this (fitted).
    participant: float = 1.5
    # The time a query names: the messages said then gain this (fitted).
    date: float = 1.0
    # "now" / "at first": the best TIME_ORDER_AMONG candidates gain this times their
    # standardised time said (the later, or the earlier, of two statements wins). Half a
    # standard deviation, not fitted.
    time_order: float = 0.5
    time_order_among: int = 10
    # The agent's own replies rank this much lower unless the query asks what the agent
    # said: users ask memory what *they* said. One standard deviation, not fitted; on
    # LoCoMo, whose messages are all the users', it changes nothing.
    reply_drop: float = 1.0
    # A message that asks ranks this much lower: it matches a question in form, its
    # answer holds the fact (fitted, rounds L-M).
    question_drop: float = 0.5
    # The messages said after each of the best hits rank just below it: how many hits,
    # how many messages each, how far below the n-th one ranks (fitted, rounds L-M), and
    # the reply to a hit that asks (0.75, closer: it answers it). Off by default (0
    # turns): on the fresh everyday set, never tuned on, it put the default below every
    # cue off on one kind, and it added nothing on the tuning set; the rule is
    # to remove such a cue, not re-tune it (bench/README.md, after the redesign).
    followed_hits: int = 3
    follow_turns: int = 0
    follow_drops: tuple[float, ...] = (2.0, 2.5, 3.0)
    answer_drop: float = 0.75
    # What each candidate's surroundings add (context); None: off.
    signals: Signals | None = SIGNALS
    # A query in Chinese, Japanese or Korean script, with an embedding model not trained
    # on it (``understands_cjk`` False: the packaged MiniLM), keeps this share of the
    # dense weight: keywords lead. Half, not fitted.
    unread_script_dense_share: float = 0.5

    @classmethod
    def off(cls) -> Ranking:
        """Every cue off: fusion of the two sides and nothing else."""
        return cls(participant=0.0, date=0.0, time_order=0.0, reply_drop=0.0, question_drop=0.0,
                   follow_turns=0, signals=None)  # fmt: skip

    def with_(self, **changes: object) -> Ranking:
        """A copy with ``changes`` (for an ablation: ``Ranking().with_(date=0.0)``)."""
        return replace(self, **changes)  # type: ignore[arg-type]


DEFAULT_RANKING = Ranking()
CUES_OFF = Ranking.off()
# Facts and a door's items (Memory.retrieve, the plane, the LangGraph store) are not
# turns of a conversation: no turns around them, no speaker, no replies of the agent.
# The steps about turns are off (the speaker boost and signal, the neighbour and
# conversation signals, the agent reply drop, following); the cues of the query (a
# time it names, "now" / "at first", a question) stay.
FACT_RANKING = DEFAULT_RANKING.with_(
    participant=0.0, reply_drop=0.0, follow_turns=0,
    signals=SIGNALS._replace(neighbour=0.0, conversation=0.0, speaker=0.0),
)  # fmt: skip

__all__ = [
    "BM25_B",
    "BM25_K1",
    "CUES_OFF",
    "DEFAULT_DENSE_WEIGHT",
    "DEFAULT_RANKING",
    "FACT_RANKING",
    "FETCH_FACTOR",
    "MAX_FOLLOW_TURNS",
    "RECORDED_SHARE",
    "SAME_CONVERSATION_SECONDS",
    "SIGNALS",
    "YEARS_BACK",
    "Ranking",
    "Signals",
]
