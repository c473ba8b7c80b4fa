"""The messages said right after a recall's best hits, ranked just below them,
and messages that ask ranked below their own score.

A reply often answers the message before it without sharing a word with the
question ("Who's your favourite team?" / "The Wolves are solid"), so neither
search finds it. Each chunk knows the id of the message stored after it
(``metadata["next"]``); following that chain from the best hits reaches the
reply for one store read per step.

A message that asks matches a question in form ("What's your favourite
movie?" for "What is Nate's favourite movie?") but seldom holds the answer:
on LoCoMo a message ending on a question mark is evidence half as often as
another. It ranks :data:`QUESTION_DROP` lower, and the reply to such a hit
ranks :data:`ANSWER_DROP` below it instead of the first of :data:`FOLLOW_DROPS`.

Chosen on LoCoMo conversations 0-2 and confirmed on 3-4 (rounds L and M of
bench/README.md): the 3 best hits, 2 messages each, at 2.0 and 2.5 below the
hit's fused score (in standard deviations); then questions lowered by 0.5 and
their replies drawn 0.75 below them. Each step raised recall on both halves.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import NamedTuple

from fastaiagent.agent.memory_blocks.recall_weights import (
    FOLLOW_DROPS,
    FOLLOWED_HITS,
    SAME_CONVERSATION_SECONDS,
)
from fastaiagent.facts.vectors import recorded_at
from fastaiagent.kb.protocols import NAMESPACE_KEY, Chunk

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


def asks(text: str) -> bool:
    """Whether a message ends on a question; a trailing ``[...]`` note (an
    attachment's description) and closing quotes do not count."""
    end = text.rstrip()
    if end.endswith("]") and "[" in end:
        end = end[: end.rfind("[")].rstrip()
    return end.rstrip(_CLOSERS).endswith(QUESTION_MARKS)


def lower_where(
    fused: dict[str, float], chunks: dict[str, Chunk], drop: float, which: Callable[[Chunk], bool]
) -> None:
    """Rank every candidate of ``fused`` whose chunk is ``which`` ``drop`` lower."""
    for chunk_id in fused:
        if which(chunks[chunk_id]):
            fused[chunk_id] -= drop


def lower_questions(fused: dict[str, float], chunks: dict[str, Chunk], drop: float) -> None:
    """Rank every candidate of ``fused`` that :func:`asks` ``drop`` lower."""
    lower_where(fused, chunks, drop, lambda chunk: asks(chunk.text))


def draw_following(
    fused: dict[str, float],
    chunks: dict[str, Chunk],
    fetch: Fetch,
    *,
    namespace: str,
    turns: int,
    answer_drop: float | None = None,
) -> None:
    """Give the ``turns`` messages after each of the best hits of ``fused`` the
    hit's score minus :data:`FOLLOW_DROPS` (when that beats their own score);
    with ``answer_drop``, the reply to a hit that :func:`asks` gets the hit's
    score minus ``answer_drop`` instead.

    ``chunks`` holds every candidate of ``fused`` and gains the messages read
    with ``fetch``; only messages of ``namespace`` said within
    :data:`SAME_CONVERSATION_SECONDS` of the hit are drawn in."""
    best = heapq.nlargest(FOLLOWED_HITS, fused, key=fused.__getitem__)
    answer_drops = None if answer_drop is None else (answer_drop, *FOLLOW_DROPS[1:])
    chain = {
        hit: _Origin(
            fused[hit],
            recorded_at(chunks[hit]),
            answer_drops if answer_drops and asks(chunks[hit].text) else FOLLOW_DROPS,
        )
        for hit in best
    }
    for step in range(min(turns, len(FOLLOW_DROPS))):
        following: dict[str, _Origin] = {}
        for chunk_id, origin in chain.items():
            after = chunks[chunk_id].metadata.get("next")
            if not isinstance(after, str):
                continue
            rival = following.get(after)
            if rival is None or origin.score - origin.drops[step] > rival.score - rival.drops[step]:
                following[after] = origin
        missing = [chunk_id for chunk_id in following if chunk_id not in chunks]
        if missing:  # a read by id is not scoped: keep this namespace's messages only
            chunks.update(
                (c.id, c) for c in fetch(missing) if c.metadata.get(NAMESPACE_KEY) == namespace
            )
        chain = {}
        for chunk_id, origin in following.items():
            chunk = chunks.get(chunk_id)
            at = recorded_at(chunk) if chunk is not None else None
            if not said_together(at, origin.at):
                continue
            drawn = origin.score - origin.drops[step]
            fused[chunk_id] = max(fused.get(chunk_id, drawn), drawn)
            chain[chunk_id] = origin
