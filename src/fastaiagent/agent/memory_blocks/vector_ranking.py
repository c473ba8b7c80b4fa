"""How hybrid recall orders its candidates, once the searches have answered.

The steps, in order, each measured on LoCoMo (docs/research/recall-history.md):

1. a keyword hit lends ``neighbour_weight`` of its score to the message after
   it (off by default);
2. the dense, time-listed and keyword scores are standardised and blended
   (:func:`~fastaiagent.kb.hybrid.calibrated_fuse`);
3. the messages of the speaker the query names gain ``participant_boost``,
   those recorded in the time it names ``date_boost``; the agent's own replies
   rank ``reply_drop`` lower, unless the query asks what the agent said; a
   query that asks how things stand now (or were at first) raises the later
   (earlier) of the best candidates (:func:`prefer_in_time`);
4. messages that ask rank ``question_drop`` lower
   (:func:`~fastaiagent.agent.memory_blocks.vector_following.lower_questions`);
5. the ``follow_turns`` messages after the best hits rank just below them
   (:func:`~fastaiagent.agent.memory_blocks.vector_following.draw_following`);
6. with ``surroundings``, each candidate gains what the turns around it say
   (:mod:`~fastaiagent.agent.memory_blocks.vector_context`).

The searches themselves (which store, which query text) stay with the block;
the weights of every step are in :mod:`.recall_weights`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from fastaiagent.agent.memory_blocks.recall_weights import (
    ANSWER_DROP,
    TIME_ORDER_AMONG,
    TIME_ORDER_WEIGHT,
)
from fastaiagent.agent.memory_blocks.vector_context import Found, add_context
from fastaiagent.agent.memory_blocks.vector_following import (
    Fetch,
    draw_following,
    lower_questions,
    lower_where,
)
from fastaiagent.facts.vectors import recorded_at
from fastaiagent.kb.hybrid import calibrated_fuse, standardized, unit_score
from fastaiagent.kb.protocols import Chunk
from fastaiagent.kb.query_cues import DateCue


class RankingOptions(Protocol):
    """The options of :class:`~fastaiagent.agent.memory_blocks.vector.VectorBlock`
    that ranking reads."""

    dense_weight: float
    neighbour_weight: float
    participant_boost: float
    date_boost: float
    reply_drop: float
    question_drop: float
    follow_turns: int
    surroundings: bool
    namespace: str


@dataclass(frozen=True)
class Searched:
    """What the searches found: ``(chunk, similarity)`` by meaning and among the
    messages of the time the query names, ``(id, BM25 score)`` by keywords, and
    every candidate's chunk by id (the keyword hits' included)."""

    dense: Sequence[tuple[Chunk, float]]
    recorded: Sequence[tuple[Chunk, float]]
    keyword: Sequence[tuple[str, float]]
    chunks: dict[str, Chunk]
    keyword_complete: bool = False  # every message holding a query term is in ``keyword``
    dense_share: float = 1.0  # the share of ``dense_weight`` the dense side keeps for this query


def rank_hybrid(
    options: RankingOptions,
    searched: Searched,
    *,
    speaker: str | None,
    when: DateCue | None,
    fetch: Fetch,
    about_replies: bool = False,
    time_order: int = 0,
) -> list[tuple[Chunk, float]]:
    """The candidates of ``searched`` best first, each with its score in (0, 1).

    ``speaker`` / ``when`` are the participant and the time the query names,
    ``about_replies`` whether it asks what the agent said, ``time_order`` 1 when
    it asks how things stand now, -1 how they were at first
    (:func:`~fastaiagent.kb.query_cues.time_order`);
    ``fetch`` reads chunks by id (the messages after the best hits), which are
    added to ``searched.chunks``: a ``Searched`` serves one ranking."""
    by_id = searched.chunks  # gains the messages drawn after the best hits
    keyword = lend_to_next(searched.keyword, by_id, options.neighbour_weight)
    fused = calibrated_fuse(
        [(c.id, s) for c, s in searched.dense],
        keyword,
        dense_weight=options.dense_weight * searched.dense_share,
        recorded=[(c.id, s) for c, s in searched.recorded],
        keyword_complete=searched.keyword_complete,
    )
    boost_cues(fused, by_id, speaker, options.participant_boost, when, options.date_boost)
    if time_order:
        prefer_in_time(fused, by_id, time_order)
    if options.reply_drop and not about_replies:
        lower_replies(fused, by_id, options.reply_drop)
    if options.question_drop:
        lower_questions(fused, by_id, options.question_drop)
    if options.follow_turns and fused:
        draw_following(
            fused,
            by_id,
            fetch,
            namespace=options.namespace,
            turns=options.follow_turns,
            answer_drop=ANSWER_DROP if options.question_drop else None,
        )
    if options.surroundings:
        found = Found({c.id for c, _ in searched.dense}, {c.id for c, _ in searched.recorded}, speaker)
        add_context(fused, by_id, found)
    order = sorted(fused, key=fused.__getitem__, reverse=True)
    return [(by_id[i], unit_score(fused[i])) for i in order]


def lend_to_next(
    keyword: Sequence[tuple[str, float]], chunks: dict[str, Chunk], weight: float
) -> list[tuple[str, float]]:
    """Keyword scores after each hit lends ``weight`` of its score to the message
    after it (the reply that completes it: "what did you adopt?" -> "a puppy!")
    when that message is a candidate too. Lending to any next message (one more
    store read) measured the same on LoCoMo."""
    if not weight:
        return list(keyword)
    scores = dict(keyword)
    for chunk_id, score in keyword:
        following = chunks[chunk_id].metadata.get("next")
        if isinstance(following, str) and following in chunks:
            scores[following] = scores.get(following, 0.0) + weight * score
    return list(scores.items())


def lower_replies(fused: dict[str, float], chunks: dict[str, Chunk], drop: float) -> None:
    """Rank the agent's own messages (role ``assistant``) ``drop`` lower."""
    lower_where(fused, chunks, drop, lambda chunk: chunk.metadata.get("role") == "assistant")


def prefer_in_time(fused: dict[str, float], chunks: dict[str, Chunk], direction: int) -> None:
    """Raise the best :data:`TIME_ORDER_AMONG` candidates by ``TIME_ORDER_WEIGHT``
    times their standardised time said (``direction`` 1) or its opposite (-1):
    among the messages that answer, the later (earlier) ones. A message with no
    time is taken as said in the middle of the others."""
    best = sorted(fused, key=fused.__getitem__, reverse=True)[:TIME_ORDER_AMONG]
    said = [recorded_at(chunks[chunk_id]) for chunk_id in best]
    known = [at for at in said if at is not None]
    middle = sum(known) / len(known) if known else 0.0
    times = [middle if at is None else at for at in said]
    for chunk_id, z in zip(best, standardized(times), strict=True):
        fused[chunk_id] += direction * TIME_ORDER_WEIGHT * z


def boost_cues(
    fused: dict[str, float],
    chunks: dict[str, Chunk],
    speaker: str | None,
    participant_boost: float,
    when: DateCue | None,
    date_boost: float,
) -> None:
    """Raise the candidates of the speaker the query names and of the time it names."""
    if speaker is None and when is None:
        return
    for chunk_id, chunk in chunks.items():
        if speaker is not None and chunk.metadata.get("speaker") == speaker:
            fused[chunk_id] += participant_boost
        at = recorded_at(chunk) if when is not None else None
        if when is not None and at is not None and when.matches(at):
            fused[chunk_id] += date_boost
