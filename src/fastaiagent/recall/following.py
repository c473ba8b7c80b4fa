"""The messages said right after a recall's best hits, and messages that ask.

A reply often answers the message before it without sharing a word with the
question ("Who's your favourite team?" / "The Wolves are solid"), so neither
search finds it. Each chunk knows the id of the message stored after it
(``metadata["next"]``); following that chain from the best hits reaches the
reply for one store read per step.

A message that asks matches a question in form ("What's your favourite
movie?" for "What is Nate's favourite movie?") but seldom holds the answer:
on LoCoMo a message ending on a question mark is evidence half as often as
another. It ranks ``Ranking.question_drop`` lower, and the reply to such a hit
ranks ``Ranking.answer_drop`` below it instead of the first follow drop.
The weights are in :mod:`.weights`; these functions return score changes and
leave their arguments alone.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from fastaiagent.facts.vectors import recorded_at
from fastaiagent.kb.protocols import NAMESPACE_KEY, Chunk
from fastaiagent.recall.kept import kept_for_short_texts
from fastaiagent.recall.weights import SAME_CONVERSATION_SECONDS

QUESTION_MARKS = ("?", "\uff1f", "\u061f")  # ASCII, full-width (CJK) and Arabic
_CLOSERS = "\"')\u201d\u2019\u00bb"  # a quote or bracket may close the question

Fetch = Callable[[Sequence[str]], list[Chunk]]


class _Origin(NamedTuple):
    """The hit a drawn message follows: its score, when it was said, its drops."""

    score: float
    at: float | None
    drops: tuple[float, ...]


def said_together(first: float | None, second: float | None) -> bool:
    """Whether two messages said at ``first`` and ``second`` (epoch seconds, None
    when unknown) belong to one conversation: within SAME_CONVERSATION_SECONDS."""
    return first is not None and second is not None and abs(first - second) <= SAME_CONVERSATION_SECONDS


@kept_for_short_texts(8192)  # the same hits come back query after query
def asks(text: str) -> bool:
    """Whether a message ends on a question (closing quotes and brackets aside)."""
    return text.rstrip().rstrip(_CLOSERS).endswith(QUESTION_MARKS)


def follow(
    scores: Mapping[str, float],
    chunks: Mapping[str, Chunk],
    fetch: Fetch,
    *,
    namespace: str,
    turns: int,
    hits: int,
    drops: tuple[float, ...],
    answer_drop: float | None = None,
) -> tuple[dict[str, float], dict[str, Chunk]]:
    """The score changes that rank the ``turns`` messages after each of the ``hits``
    best of ``scores`` at the hit's score minus ``drops`` (when that beats their own
    score; the reply to a hit that :func:`asks` at ``answer_drop`` below it), and the
    chunks read with ``fetch`` to get there. Only messages of ``namespace`` said
    within :data:`SAME_CONVERSATION_SECONDS` of the hit are drawn in."""
    best = heapq.nlargest(hits, scores, key=scores.__getitem__)
    answer_drops = None if answer_drop is None else (answer_drop, *drops[1:])
    chain = {
        hit: _Origin(
            scores[hit],
            recorded_at(chunks[hit]),
            answer_drops if answer_drops and asks(chunks[hit].text) else drops,
        )
        for hit in best
    }
    read: dict[str, Chunk] = {}
    drawn: dict[str, float] = {}  # the new score of each message drawn in
    for step in range(min(turns, len(drops))):
        following: dict[str, _Origin] = {}
        for chunk_id, origin in chain.items():
            after = (chunks.get(chunk_id) or read[chunk_id]).metadata.get("next")
            if not isinstance(after, str):
                continue
            rival = following.get(after)
            if rival is None or origin.score - origin.drops[step] > rival.score - rival.drops[step]:
                following[after] = origin
        missing = [chunk_id for chunk_id in following if chunk_id not in chunks and chunk_id not in read]
        if missing:  # a read by id is not scoped: keep this namespace's messages only
            read.update((c.id, c) for c in fetch(missing) if c.metadata.get(NAMESPACE_KEY) == namespace)
        chain = {}
        for chunk_id, origin in following.items():
            chunk = chunks.get(chunk_id) or read.get(chunk_id)
            if chunk is None or not said_together(recorded_at(chunk), origin.at):
                continue
            score = origin.score - origin.drops[step]
            now = drawn.get(chunk_id, scores.get(chunk_id, score))
            drawn[chunk_id] = max(now, score)
            chain[chunk_id] = origin
    changes = {i: s - scores.get(i, 0.0) for i, s in drawn.items() if s != scores.get(i)}
    return changes, {i: read[i] for i in drawn if i in read}


__all__ = ["QUESTION_MARKS", "Fetch", "asks", "follow", "said_together"]
