"""A second look at recall's candidates: what each one's surroundings say.

After fusion, the cues and the messages drawn after the best hits, each
candidate's score is one number about that message alone. Evidence sits among
evidence: the turns around an answer and the conversation it was said in are
often candidates too. So each candidate gains a weighted sum of signals
(:data:`~.weights.SIGNALS`):

- ``length``: ``log(1 + words)``, weight 0 by default (see below);
- ``neighbour``: the best score of the message before or after it, when that
  message is a candidate too (the lowest candidate's score when none is);
- ``conversation``: the best score of another candidate said within
  :data:`~.weights.SAME_CONVERSATION_SECONDS`
  of it (the lowest candidate's score when none was);
- ``by_meaning``: found by the dense search;
- ``speaker``: said by the participant the query names; ``asks``: a question.

The weights were fitted on LoCoMo conversations 0-2 (a pairwise logistic
regression; the options chosen by fitting on two of the three and scoring the
third) and confirmed on 3-4, where they raised recall on both halves (the
figures are in bench/README.md). It reads only the candidates: no store access.

The fitted length weight is off: LoCoMo's turns are all chat lines of similar
length, where a longer one holds more; in a support or coding chat the
assistant's long replies then outrank the user's short statements, which are
what memory is for (bench/everyday_recall.py: support and coding gain far more
than LoCoMo loses; docs/research/recall-history.md).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Collection, Iterator, Mapping
from typing import NamedTuple

from fastaiagent.facts.vectors import recorded_at
from fastaiagent.kb.protocols import Chunk
from fastaiagent.recall.following import asks, said_together
from fastaiagent.recall.weights import SAME_CONVERSATION_SECONDS, SIGNALS, Signals


class Found(NamedTuple):
    """What the searches said of the candidates: the ids the dense search found,
    and the participant the query names (if any)."""

    by_meaning: Collection[str]
    speaker: str | None
    asking: Collection[str] | None = None
    """The candidates that ask (:func:`~.following.asks`), when already read; None: read here."""


def surroundings(
    scores: Mapping[str, float],
    chunks: Mapping[str, Chunk],
    found: Found,
    weights: Signals = SIGNALS,
) -> dict[str, float]:
    """What each candidate of ``scores`` gains: its signals times ``weights``
    (``chunks`` holds every candidate). A signal weighted 0 is not read."""
    changes = dict.fromkeys(scores, 0.0)
    columns = _Columns(scores, chunks, found)
    for name, weight in zip(Signals._fields, weights, strict=True):
        if weight:
            for chunk_id, value in columns.read(name):
                changes[chunk_id] += weight * value
    return changes


def signals(
    fused: Mapping[str, float], chunks: Mapping[str, Chunk], found: Found
) -> dict[str, Signals]:
    """Each candidate's signals, read from the scores of ``fused`` (see the module)."""
    columns = _Columns(fused, chunks, found)
    values = {chunk_id: [0.0] * len(Signals._fields) for chunk_id in fused}
    for n, name in enumerate(Signals._fields):
        for chunk_id, value in columns.read(name):
            values[chunk_id][n] = value
    return {chunk_id: Signals(*row) for chunk_id, row in values.items()}


class _Columns:
    """The candidates' signals, one signal at a time (each read only when asked):
    ``(id, value)`` pairs, the candidates a signal leaves at 0 left out."""

    def __init__(self, fused: Mapping[str, float], chunks: Mapping[str, Chunk], found: Found) -> None:
        self.fused, self.chunks, self.found = fused, chunks, found
        self._at: dict[str, float | None] | None = None

    def read(self, name: str) -> Iterator[tuple[str, float]]:
        fused, chunks, (by_meaning, speaker, asking) = self.fused, self.chunks, self.found
        if name == "length":
            return ((i, math.log1p(len(chunks[i].text.split()))) for i in fused)
        if name in ("neighbour", "conversation"):
            floor = min(fused.values(), default=0.0)
            near = _neighbour_scores(fused, chunks, self.at) if name == "neighbour" else _conversation_scores(fused, self.at)
            return ((i, near.get(i, floor)) for i in fused)
        if name == "by_meaning":
            return ((i, 1.0) for i in fused if i in by_meaning)
        if name == "speaker":
            return ((i, 1.0) for i in fused if speaker is not None and chunks[i].metadata.get("speaker") == speaker)
        if asking is not None:
            return ((i, 1.0) for i in fused if i in asking)
        return ((i, 1.0) for i in fused if asks(chunks[i].text))

    @property
    def at(self) -> dict[str, float | None]:
        """When each candidate was said (for the neighbour and conversation signals)."""
        if self._at is None:
            self._at = {chunk_id: recorded_at(self.chunks[chunk_id]) for chunk_id in self.fused}
        return self._at


def _neighbour_scores(
    scores: Mapping[str, float], chunks: Mapping[str, Chunk], at: Mapping[str, float | None]
) -> dict[str, float]:
    """For each candidate, the best score of a candidate said right before or after
    it (``metadata["next"]`` links them) within the same conversation."""
    best: dict[str, float] = {}
    for chunk_id, score in scores.items():
        after = chunks[chunk_id].metadata.get("next")
        if not isinstance(after, str) or after not in scores:
            continue
        if not said_together(at[chunk_id], at[after]):
            continue
        best[chunk_id] = max(best.get(chunk_id, scores[after]), scores[after])
        best[after] = max(best.get(after, score), score)
    return best


def _conversation_scores(
    scores: Mapping[str, float], at: Mapping[str, float | None]
) -> dict[str, float]:
    """For each candidate, the best score of another candidate said within
    SAME_CONVERSATION_SECONDS of it: the best before it and the best after it in
    time order, each a sliding window (linear after the sort)."""
    timed = sorted((when, chunk_id) for chunk_id, when in at.items() if when is not None)
    times = [when for when, _ in timed]
    values = [scores[chunk_id] for _, chunk_id in timed]
    low = [bisect.bisect_left(times, when - SAME_CONVERSATION_SECONDS) for when in times]
    high = [bisect.bisect_right(times, when + SAME_CONVERSATION_SECONDS) for when in times]
    before = _window_max(values, [(low[i], i) for i in range(len(timed))])
    after = _window_max(values, [(i + 1, high[i]) for i in range(len(timed))])
    best = {}
    for (_, chunk_id), left, right in zip(timed, before, after, strict=True):
        found = [v for v in (left, right) if v is not None]
        if found:
            best[chunk_id] = max(found)
    return best


def _window_max(values: list[float], windows: list[tuple[int, int]]) -> list[float | None]:
    """The max of ``values[lo:hi]`` for each window (None when empty); both ends
    must not decrease from one window to the next (a monotonic queue)."""
    out: list[float | None] = []
    queue: deque[int] = deque()  # indexes whose values decrease
    added = 0
    for lo, hi in windows:
        while added < hi:
            while queue and values[queue[-1]] <= values[added]:
                queue.pop()
            queue.append(added)
            added += 1
        while queue and queue[0] < lo:
            queue.popleft()
        out.append(values[queue[0]] if queue and lo < hi else None)
    return out


__all__ = ["Found", "signals", "surroundings"]
