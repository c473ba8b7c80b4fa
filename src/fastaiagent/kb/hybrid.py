"""Fusing keyword (BM25) and dense rankings into one.

Dense cosine scores live in roughly [0, 1] while BM25 scores are unbounded,
so the BM25 side is scaled by its best score before the two are blended.
A document found by one side only gets that side's share. The fused score
stays in [0, 1], so it can stand in for similarity in memory scoring.
"""

from __future__ import annotations

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


def check_mode(retrieval: str) -> str:
    """``retrieval`` if it names a mode of :data:`RETRIEVAL_MODES`."""
    return one_of("retrieval", retrieval, RETRIEVAL_MODES)
