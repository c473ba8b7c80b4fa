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
    if len(a) != len(b):
        raise InvalidValueError(
            f"cannot compare vectors of different lengths ({len(a)} and {len(b)})"
        )
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
