"""A second look at recall's candidates: what each one's surroundings say.

After fusion, the cues and the messages drawn after the best hits, each
candidate's score is one number about that message alone. Evidence sits among
evidence: the turns around an answer and the conversation it was said in are
often candidates too, and a long message holds more than a short one. So each
candidate gains a weighted sum of signals (:data:`SIGNALS`):

- ``length``: ``log(1 + words)``;
- ``neighbour``: the best score of the message before or after it, when that
  message is a candidate too (the lowest candidate's score when none is);
- ``conversation``: the best score of another candidate said within
  :data:`~fastaiagent.agent.memory_blocks.vector_following.SAME_CONVERSATION_SECONDS`
  of it (the lowest candidate's score when none was);
- ``by_meaning`` / ``by_time``: found by the dense search / among the
  messages of the time the query names;
- ``speaker``: said by the participant the query names; ``asks``: a question.

The weights were fitted on LoCoMo conversations 0-2 (a pairwise logistic
regression; the options chosen by fitting on two of the three and scoring the
third) and confirmed on 3-4: R@5 / R@10 0.762 / 0.847 -> 0.793 / 0.847 and
0.710 / 0.773 -> 0.733 / 0.796 (docs/semantic.md). It reads only the
candidates: no store access.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Collection, Mapping
from typing import NamedTuple

from fastaiagent.agent.memory_blocks.vector_following import SAME_CONVERSATION_SECONDS, asks
from fastaiagent.facts.vectors import recorded_at
from fastaiagent.kb.protocols import Chunk


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


SIGNALS = Signals(
    length=0.49,
    neighbour=0.30,
    conversation=0.14,
    by_meaning=0.42,
    by_time=0.40,
    speaker=1.39,
    asks=-0.24,
)


def add_context(
    fused: dict[str, float],
    chunks: Mapping[str, Chunk],
    *,
    by_meaning: Collection[str],
    by_time: Collection[str],
    speaker: str | None,
    weights: Signals = SIGNALS,
) -> None:
    """Add to each candidate of ``fused`` its signals times ``weights``.

    ``chunks`` holds every candidate; ``by_meaning`` and ``by_time`` are the ids
    the dense search and the time-listed search found; ``speaker`` is the
    participant the query names, if any."""
    found = signals(fused, chunks, by_meaning=by_meaning, by_time=by_time, speaker=speaker)
    for chunk_id, values in found.items():
        fused[chunk_id] += sum(w * v for w, v in zip(weights, values, strict=True))


def signals(
    fused: Mapping[str, float],
    chunks: Mapping[str, Chunk],
    *,
    by_meaning: Collection[str],
    by_time: Collection[str],
    speaker: str | None,
) -> dict[str, Signals]:
    """Each candidate's signals, read from the scores of ``fused`` (see the module)."""
    floor = min(fused.values(), default=0.0)
    neighbour = _neighbour_scores(fused, chunks)
    conversation = _conversation_scores(fused, chunks)
    out = {}
    for chunk_id in fused:
        chunk = chunks[chunk_id]
        out[chunk_id] = Signals(
            length=math.log1p(len(chunk.text.split())),
            neighbour=neighbour.get(chunk_id, floor),
            conversation=conversation.get(chunk_id, floor),
            by_meaning=float(chunk_id in by_meaning),
            by_time=float(chunk_id in by_time),
            speaker=float(speaker is not None and chunk.metadata.get("speaker") == speaker),
            asks=float(asks(chunk.text)),
        )
    return out


def _neighbour_scores(scores: Mapping[str, float], chunks: Mapping[str, Chunk]) -> dict[str, float]:
    """For each candidate, the best score of a candidate said right before or after
    it (``metadata["next"]`` links them) within the same conversation."""
    best: dict[str, float] = {}
    for chunk_id, score in scores.items():
        after = chunks[chunk_id].metadata.get("next")
        if not isinstance(after, str) or after not in scores or not _together(chunks, chunk_id, after):
            continue
        best[chunk_id] = max(best.get(chunk_id, scores[after]), scores[after])
        best[after] = max(best.get(after, score), score)
    return best


def _conversation_scores(scores: Mapping[str, float], chunks: Mapping[str, Chunk]) -> dict[str, float]:
    """For each candidate, the best score of another candidate said within
    SAME_CONVERSATION_SECONDS of it (sorted by time: n log n, not n squared)."""
    timed = sorted(
        (at, chunk_id) for chunk_id in scores if (at := recorded_at(chunks[chunk_id])) is not None
    )
    times = [at for at, _ in timed]
    best: dict[str, float] = {}
    for at, chunk_id in timed:
        low = bisect.bisect_left(times, at - SAME_CONVERSATION_SECONDS)
        high = bisect.bisect_right(times, at + SAME_CONVERSATION_SECONDS)
        others = [scores[other] for _, other in timed[low:high] if other != chunk_id]
        if others:
            best[chunk_id] = max(others)
    return best


def _together(chunks: Mapping[str, Chunk], first: str, second: str) -> bool:
    a, b = recorded_at(chunks[first]), recorded_at(chunks[second])
    return a is not None and b is not None and abs(a - b) <= SAME_CONVERSATION_SECONDS


__all__ = ["SIGNALS", "Signals", "add_context", "signals"]
