"""Every weight recall ranks with, in one place (the steps that use them are in
:mod:`.vector_ranking`; how each was measured is in docs/research/recall-history.md
and the experiment log in bench/README.md).

The weights are in standard deviations of the fused score (the dense and
keyword sides are standardised and blended first), so they add up on one scale.
Each was fitted on LoCoMo conversations 0-2 and confirmed on 3-4, and is kept
only where it also does no harm on everyday conversations
(bench/everyday_recall.py).
"""

from __future__ import annotations

from typing import NamedTuple

from fastaiagent.kb.hybrid import DEFAULT_DENSE_WEIGHT  # the dense side's share of the blend

# -- the cues of the query: RecallOptions' defaults -----------------------------------
DEFAULT_PARTICIPANT_BOOST = 1.5  # the messages of the speaker a query names
DEFAULT_DATE_BOOST = 1.0  # the messages said in the time a query names
# The agent's own replies rank this much lower (unless the query asks what the agent
# said): users ask memory what *they* said, and a support or coding assistant's long
# replies echo every word of it. One standard deviation, not fitted; on LoCoMo, whose
# messages are all the user's, it changes nothing.
DEFAULT_REPLY_DROP = 1.0
# A query in Chinese, Japanese or Korean script, with an embedding model that was not
# trained on it (``understands_cjk`` False: the packaged MiniLM), keeps this share of
# ``dense_weight``: keywords lead. Half, not fitted: on the everyday Chinese chat the
# keyword side alone finds far more answers than the dense side alone.
UNREAD_SCRIPT_DENSE_SHARE = 0.5
# A query that asks how things stand now ("... now?", "current", "现在") raises the
# best TIME_ORDER_AMONG candidates by TIME_ORDER_WEIGHT times their standardised time
# said: the later of two statements of one fact wins ("originally", "一开始": the
# earlier). Half a standard deviation, not fitted; it goes with ``date_boost`` 0.
TIME_ORDER_WEIGHT = 0.5
TIME_ORDER_AMONG = 10
# Share of a keyword hit's score lent to the next message: off by default. With 4
# candidates per item it measured worse on the tuned half (it pays only with 8
# candidates, which cost about 1 ms more per recall at 10k; bench/README.md).
DEFAULT_NEIGHBOUR_WEIGHT = 0.0

# -- questions and the messages that follow a hit (vector_following) -----------------
DEFAULT_FOLLOW_TURNS = 2  # messages after each best hit ranked below it
FOLLOWED_HITS = 3  # the hits whose following messages are drawn in
MAX_FOLLOW_TURNS = 3  # each turn is one store read
FOLLOW_DROPS = (2.0, 2.5, 3.0)  # how far below its hit the n-th message after it ranks
# Said over an hour after the hit: a later conversation. Not fitted: 30 minutes to 6 hours
# measure the same on both benchmarks (LoCoMo's sessions are days apart).
SAME_CONVERSATION_SECONDS = 3600.0
QUESTION_DROP = 0.5  # how far a message that asks ranks below its own score
ANSWER_DROP = 0.75  # how far the reply to a hit that asks ranks below that hit


# -- the surroundings of a candidate (vector_context) ---------------------------------
class Signals(NamedTuple):
    """A candidate's signals, or the weight of each (in standard deviations of
    the fused score per unit of the signal)."""

    length: float
    neighbour: float
    conversation: float
    by_meaning: float
    by_time: float
    speaker: float
    asks: float


# Fitted together (a pairwise logistic regression on conversations 0-2): dropping the
# speaker or asks weight, which look like doubles of participant_boost and
# QUESTION_DROP, loses on both LoCoMo and the everyday bench.
SIGNALS = Signals(
    length=0.0,  # fitted positive on LoCoMo; off: long replies crowded out short statements
    neighbour=0.30,
    conversation=0.14,
    by_meaning=0.42,
    by_time=0.40,
    speaker=1.39,
    asks=-0.24,
)

__all__ = [
    "ANSWER_DROP",
    "DEFAULT_DATE_BOOST",
    "DEFAULT_DENSE_WEIGHT",
    "DEFAULT_FOLLOW_TURNS",
    "DEFAULT_NEIGHBOUR_WEIGHT",
    "DEFAULT_PARTICIPANT_BOOST",
    "DEFAULT_REPLY_DROP",
    "FOLLOWED_HITS",
    "FOLLOW_DROPS",
    "MAX_FOLLOW_TURNS",
    "QUESTION_DROP",
    "SAME_CONVERSATION_SECONDS",
    "SIGNALS",
    "TIME_ORDER_AMONG",
    "TIME_ORDER_WEIGHT",
    "UNREAD_SCRIPT_DENSE_SHARE",
    "Signals",
]
