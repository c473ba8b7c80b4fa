"""Cosine similarity in pure Python, for the places that rank a few vectors.

The base install has no numpy, and the callers (the plane's embedding ranker,
the LangGraph store's search) score at most a few thousand vectors per query,
so the standard library is fast enough: ``map``/``sum`` and ``math.hypot`` run
their loops in C.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence

from fastaiagent.errors import InvalidValueError


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine of the angle between ``a`` and ``b``, in [-1, 1].

    Identical directions give 1.0 and orthogonal vectors 0.0. A zero vector
    has no direction, so any pair with one scores 0.0 rather than dividing by
    zero. Vectors of different lengths raise :class:`InvalidValueError` (a
    ``ValueError``): they come from different embedders, so no score would mean
    anything.
    """
    return _cosine(a, math.hypot(*a), b)


def _cosine(a: Sequence[float], a_norm: float, b: Sequence[float]) -> float:
    """:func:`cosine` with ``a``'s norm given (computed once for many ``b``)."""
    _check_lengths(a, b)
    norm = a_norm * math.hypot(*b)
    if not norm:
        return 0.0
    dot = sum(map(operator.mul, a, b))
    # Rounding can push parallel vectors a hair past 1; keep the documented range.
    return max(-1.0, min(1.0, dot / norm))


def cosines(query: Sequence[float], vectors: Iterable[Sequence[float]]) -> list[float]:
    """:func:`cosine` of ``query`` and each of ``vectors`` (the same values), the
    query's norm computed once."""
    query_norm = math.hypot(*query)
    return [_cosine(query, query_norm, vector) for vector in vectors]


def best_unit_cosines(query: Sequence[float], groups: Iterable[Iterable[Sequence[float]]]) -> list[float]:
    """For each group of *unit-length* vectors (stored normalised, as the LangGraph
    store keeps an item's), the best :func:`cosine` with ``query``: the query is
    normalised once, so each cosine is one dot product (no norm per vector). A
    zero query scores 0.0 everywhere; vectors of another length raise as in :func:`cosine`."""
    norm = math.hypot(*query)
    unit = [x / norm for x in query] if norm else [0.0] * len(query)
    best_of = []
    for group in groups:
        best = -1.0
        for vector in group:
            _check_lengths(unit, vector)
            best = max(best, sum(map(operator.mul, unit, vector)))
        best_of.append(max(-1.0, min(1.0, best)))
    return best_of


def _check_lengths(a: Sequence[float], b: Sequence[float]) -> None:
    if len(a) != len(b):
        raise InvalidValueError(f"cannot compare vectors of different lengths ({len(a)} and {len(b)})")
