"""One ranking function: the candidates of a query, best first, each with why.

:func:`rank` orders :class:`~.candidates.Candidates` in steps, each a pure
function that returns what it adds to each candidate's score (it edits nothing it
is given; the sum is the ranking's own), all weights from :class:`~.weights.Ranking`:

1. ``fused``: the dense, time-listed and keyword scores, each standardised over
   its own candidates and blended (:func:`~fastaiagent.kb.hybrid.calibrated_fuse`);
2. ``speaker`` / ``time``: the messages of the participant the query asks about,
   and of the time it names, gain ``participant`` / ``date``;
3. ``now`` / ``at first``: a query that asks how things stand now (were at first)
   raises the later (earlier) of the best candidates;
4. ``agent reply``: the agent's own replies rank ``reply_drop`` lower, unless the
   query asks what the agent said;
5. ``asks``: messages that ask rank ``question_drop`` lower;
6. ``follows a hit``: the messages after the best hits rank just below them
   (:mod:`.following`);
7. ``surroundings``: what the turns around each candidate say (:mod:`.context`).

Each result carries its :class:`Reason` list: the steps that moved it, by how
much (standard deviations of the fused score). ``retrieval="dense"`` and
``"bm25"`` are one side alone: its own score, no step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import NamedTuple, overload

from fastaiagent.facts.vectors import recorded_at
from fastaiagent.kb.hybrid import calibrated_fuse, standardized, unit_score
from fastaiagent.kb.protocols import Chunk
from fastaiagent.recall.candidates import Candidates
from fastaiagent.recall.context import Found, surroundings
from fastaiagent.recall.dates import DateCue
from fastaiagent.recall.following import Fetch, asks, follow
from fastaiagent.recall.query import RecallQuery
from fastaiagent.recall.weights import Ranking

Reason = tuple[str, float]
"""``(step, how much it added)``: ``("fused", 1.2)``, ``("speaker", 1.5)``."""


class Ranked(NamedTuple):
    """One candidate as ranked: its chunk, its score in (0, 1) (the fused score
    squashed, order kept) and the reasons (a tuple: made for every candidate)."""

    chunk: Chunk
    score: float
    reasons: tuple[Reason, ...] = ()


def rank(
    candidates: Candidates,
    query: RecallQuery,
    ranking: Ranking,
    *,
    retrieval: str = "hybrid",
    dense_weight: float,
    fetch: Fetch,
    namespace: str,
    speaker: str | None,
) -> Sequence[Ranked]:
    """The candidates best first (see the module), each result built when it is
    read. ``speaker``: the participant the query asks about (:meth:`RecallQuery.about`
    the speakers known once the candidates are in); ``fetch`` reads the messages
    after the best hits by id, of ``namespace`` only."""
    if retrieval == "dense":
        return _one_side(candidates, candidates.dense)
    if retrieval == "bm25":
        return _one_side(candidates, candidates.keyword, scale=True)
    return _hybrid(candidates, query, ranking, dense_weight, fetch, namespace, speaker)


def _one_side(candidates: Candidates, side: tuple[tuple[str, float], ...], scale: bool = False) -> list[Ranked]:
    """One side's own order: cosine as it is, BM25 over its best score."""
    top = (side[0][1] or 1.0) if scale and side else 1.0
    return [Ranked(candidates.chunks[i], s / top, (("side", s),)) for i, s in side]


def _hybrid(
    candidates: Candidates,
    query: RecallQuery,
    ranking: Ranking,
    dense_weight: float,
    fetch: Fetch,
    namespace: str,
    speaker: str | None,
) -> RankedList:
    chunks: Mapping[str, Chunk] = candidates.chunks
    fused = calibrated_fuse(
        candidates.dense,
        _with_entities(candidates),
        dense_weight=dense_weight * candidates.dense_share,
        recorded=candidates.recorded,
        keyword_complete=candidates.keyword_complete,
    )
    # Each step returns what it adds; the sum is kept here, in this call's own dict.
    scores, moved = dict(fused), Moves()  # moved: each step's changes, for the reasons
    when = query.when if ranking.date else None
    if speaker is not None and ranking.participant:
        moved.add(scores, _where(chunks, scores, ranking.participant, lambda c: c.metadata.get("speaker") == speaker), "speaker")
    if when is not None:
        moved.add(scores, _where(chunks, scores, ranking.date, lambda c: _said_in(c, when)), "time")
    if query.time_order and ranking.time_order:
        moved.add(scores, _in_time(scores, chunks, query.time_order, ranking), "now / at first")
    if ranking.reply_drop and not query.about_replies:
        drop = _where(chunks, scores, -ranking.reply_drop, lambda c: c.metadata.get("role") == "assistant")
        moved.add(scores, drop, "agent reply")
    # Whether each candidate asks is read once: the question drop and the surroundings both weigh it.
    asking = {i for i in scores if asks(chunks[i].text)} if ranking.question_drop or _weighs_asks(ranking) else None
    if ranking.question_drop and asking:
        moved.add(scores, dict.fromkeys(asking, -ranking.question_drop), "asks")
    drawn: Mapping[str, Chunk] = {}
    if ranking.follow_turns and scores:
        answer_drop = ranking.answer_drop or None
        changes, read = follow(scores, chunks, fetch, namespace=namespace, turns=ranking.follow_turns,
                               hits=ranking.followed_hits, drops=ranking.follow_drops, answer_drop=answer_drop)  # fmt: skip
        chunks, drawn = ({**chunks, **read}, read) if read else (chunks, drawn)
        moved.add(scores, changes, "follows a hit")
    if ranking.signals is not None:
        if asking is not None:  # and the messages following drew in
            asking.update(i for i, chunk in drawn.items() if asks(chunk.text))
        found = Found({i for i, _ in candidates.dense}, speaker, asking)
        moved.add(scores, surroundings(scores, chunks, found, ranking.signals), "surroundings")
    return RankedList(sorted(scores, key=scores.__getitem__, reverse=True), chunks, scores, fused, moved.steps)


class RankedList(Sequence[Ranked]):
    """The ranking, best first, each :class:`Ranked` made when it is first read: a
    door reads only as far as it wants (a few of its ~80 candidates), so the
    results of the rest are never built."""

    __slots__ = ("_built", "_chunks", "_fused", "_order", "_scores", "_why")

    def __init__(
        self,
        order: list[str],
        chunks: Mapping[str, Chunk],
        scores: Mapping[str, float],
        fused: Mapping[str, float],
        why: list[tuple[str, Mapping[str, float]]],
    ) -> None:
        self._order, self._chunks, self._scores, self._fused, self._why = order, chunks, scores, fused, why
        self._built: list[Ranked] = []

    def __len__(self) -> int:
        return len(self._order)

    @overload
    def __getitem__(self, index: int) -> Ranked: ...
    @overload
    def __getitem__(self, index: slice) -> list[Ranked]: ...
    def __getitem__(self, index: int | slice) -> Ranked | list[Ranked]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self._order)))]
        position = range(len(self._order))[index]  # a list's rules: negative, IndexError
        while len(self._built) <= position:
            self._built.append(self._make(self._order[len(self._built)]))
        return self._built[position]

    def __iter__(self) -> Iterator[Ranked]:
        for index in range(len(self._order)):
            yield self[index]

    def _make(self, i: str) -> Ranked:
        first = (("fused", self._fused[i]),) if i in self._fused else ()
        steps = tuple((step, change) for step, changes in self._why if (change := changes.get(i)))
        return Ranked(self._chunks[i], unit_score(self._scores[i]), (*first, *steps) if steps else first)


class Moves:
    """What each step added to which candidate, as the steps are summed: kept per
    step, so a candidate's reasons are put together only when its result is read."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, Mapping[str, float]]] = []
        """Each step's name and changes, in step order (after the fused score)."""

    def add(self, scores: dict[str, float], changes: Mapping[str, float], step: str) -> None:
        """Add ``changes`` to ``scores`` (the ranking's own sum) and note them as ``step``."""
        if changes:
            for chunk_id, change in changes.items():
                if change:
                    scores[chunk_id] = scores.get(chunk_id, 0.0) + change
            self.steps.append((step, changes))


def _weighs_asks(ranking: Ranking) -> bool:
    return ranking.signals is not None and ranking.signals.asks != 0.0


def _with_entities(candidates: Candidates) -> list[tuple[str, float]]:
    """The keyword side with the entity side's hits (a hit of both keeps its better score)."""
    if not candidates.entity:
        return list(candidates.keyword)
    merged = dict(candidates.keyword)
    for chunk_id, score in candidates.entity:
        merged[chunk_id] = max(score, merged.get(chunk_id, score))
    return list(merged.items())


def _where(
    chunks: Mapping[str, Chunk], scores: Mapping[str, float], amount: float, which: Callable[[Chunk], bool]
) -> dict[str, float]:
    """``amount`` for every candidate whose chunk is ``which``."""
    return {i: amount for i in scores if which(chunks[i])} if amount else {}


def _said_in(chunk: Chunk, when: DateCue) -> bool:
    at = recorded_at(chunk)
    return at is not None and when.matches(at)


def _in_time(scores: Mapping[str, float], chunks: Mapping[str, Chunk], direction: int, ranking: Ranking) -> dict[str, float]:
    """The best ``time_order_among`` candidates gain ``time_order`` times their
    standardised time said (``direction`` 1) or its opposite (-1). A message with
    no time is taken as said in the middle of the others."""
    best = sorted(scores, key=scores.__getitem__, reverse=True)[: ranking.time_order_among]
    said = [recorded_at(chunks[chunk_id]) for chunk_id in best]
    known = [at for at in said if at is not None]
    middle = sum(known) / len(known) if known else 0.0
    times = [middle if at is None else at for at in said]
    return {i: direction * ranking.time_order * z for i, z in zip(best, standardized(times), strict=True)}


__all__ = ["Ranked", "RankedList", "Reason", "rank"]
