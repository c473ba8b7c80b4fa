"""Fusing keyword (BM25) and dense rankings into one.

Dense cosine scores live in roughly [0, 1] while BM25 scores are unbounded,
so the two must be put on one scale before they are blended:

- :func:`fuse` scales the BM25 side by its best score (a document found by
  one side only gets that side's share); the fused score stays in [0, 1].
  Semantic facts use it.
- :func:`calibrated_fuse` standardises each side over its own candidates
  (z-scores: how far above this query's typical candidate a document is), so
  one very strong keyword hit does not flatten every other keyword score and
  a flat dense side does not drown a decisive keyword side. A document found
  by one side only gets the other side's lowest candidate score. Recall uses
  it (it measured better than :func:`fuse` with the same weights and
  candidates; the figures are in bench/README.md); :func:`unit_score` maps its
  scores into (0, 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fastaiagent._validate import fraction, one_of

RETRIEVAL_MODES = ("hybrid", "dense", "bm25")
DEFAULT_DENSE_WEIGHT = 0.5


def fuse(
    dense: Sequence[tuple[str, float]],
    keyword: Sequence[tuple[str, float]],
    *,
    dense_weight: float = DEFAULT_DENSE_WEIGHT,
) -> list[tuple[str, float]]:
    """Blend two rankings: ``w * cosine + (1 - w) * bm25 / max_bm25``, best first."""
    dense_weight = fraction("dense_weight", dense_weight)
    top = max((score for _, score in keyword), default=0.0)
    fused: dict[str, float] = {}
    for doc_id, score in dense:
        fused[doc_id] = dense_weight * max(0.0, min(1.0, score))
    if top > 0:
        for doc_id, score in keyword:
            fused[doc_id] = fused.get(doc_id, 0.0) + (1.0 - dense_weight) * score / top
    return sorted(fused.items(), key=lambda item: item[1], reverse=True)


def standardized(scores: Sequence[float]) -> list[float]:
    """``(s - mean) / std`` of each score; all zeros when the scores do not vary
    (a single keyword hit is then as strong as any other hit of its side)."""
    scale, shift = _standardizing(scores)
    return [scale * s + shift for s in scores]


def calibrated_fuse(
    dense: Sequence[tuple[str, float]],
    keyword: Sequence[tuple[str, float]],
    *,
    dense_weight: float = DEFAULT_DENSE_WEIGHT,
    recorded: Sequence[tuple[str, float]] = (),
    keyword_complete: bool = False,
) -> dict[str, float]:
    """``w * z(cosine) + (1 - w) * z(bm25)`` per document (unsorted, unbounded).

    ``recorded`` is a second dense ranking, of the messages of a time the query
    names: standardised over itself, so its best are as strong as the best of
    ``dense`` (a document in both keeps its better standing).

    ``keyword_complete`` says ``keyword`` lists every document holding a query
    term (the search returned fewer than it was asked for): every other
    candidate's BM25 score is then known to be 0, and the keyword side is
    standardised over all candidates. A few hits that all match then stand
    above the documents that match nothing, instead of being spread around
    their own mean (which put a lone rare-word hit below dense-only noise)."""
    dense_weight = fraction("dense_weight", dense_weight)
    dense_z = _z(dense)
    if recorded:
        for doc_id, z in _z(recorded).items():
            dense_z[doc_id] = max(z, dense_z.get(doc_id, z))
    if keyword_complete:
        scores = dict(keyword)
        keyword = [(doc_id, scores.get(doc_id, 0.0)) for doc_id in {**dense_z, **scores}]
    # The keyword side's z-scores are an affine map of its scores: applied inline.
    keyword_weight = 1.0 - dense_weight
    scale, shift = _standardizing([s for _, s in keyword])
    scale, shift = keyword_weight * scale, keyword_weight * shift
    raw = dict(keyword)
    floor = scale * min(raw.values(), default=0.0) + shift if raw else 0.0
    fused = {}
    for doc_id, z in dense_z.items():
        score = raw.get(doc_id)
        fused[doc_id] = dense_weight * z + (floor if score is None else scale * score + shift)
    dense_floor = dense_weight * min(dense_z.values(), default=0.0)
    for doc_id, score in raw.items():
        if doc_id not in fused:  # the keyword side alone found it
            fused[doc_id] = dense_floor + (scale * score + shift)  # as a floor is added above: ties stay ties
    return fused


def _standardizing(scores: Sequence[float]) -> tuple[float, float]:
    """``(scale, shift)`` with :func:`standardized` ``= scale * score + shift`` (an
    affine map: applied inline where a side is blended)."""
    if not scores:
        return 0.0, 0.0
    mean = sum(scores) / len(scores)
    spread = math.sqrt(sum([(s - mean) * (s - mean) for s in scores]) / len(scores))
    if spread <= 1e-12:
        return 0.0, 1.0 if len(scores) == 1 else 0.0
    return 1.0 / spread, -mean / spread


def _z(ranking: Sequence[tuple[str, float]]) -> dict[str, float]:
    scale, shift = _standardizing([s for _, s in ranking])
    return {doc_id: scale * s + shift for doc_id, s in ranking}


def unit_score(score: float) -> float:
    """A calibrated score squashed into (0, 1) (logistic), order kept, so it can
    stand in for a similarity in memory scoring."""
    return 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, score))))


def check_mode(retrieval: str) -> str:
    """``retrieval`` if it names a mode of :data:`RETRIEVAL_MODES`."""
    return one_of("retrieval", retrieval, RETRIEVAL_MODES)
