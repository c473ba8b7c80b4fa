"""Memory scoring: similarity blended with recency and importance.

``final = (1 - r - i) * similarity + r * 0.5 ** (age / half_life) + i * importance``

Shared by VectorBlock and PersistentFactBlock. With both weights at zero the
input order is returned unchanged (no scoring runs at all).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fastaiagent._validate import fraction, positive_number
from fastaiagent.errors import InvalidValueError

ItemT = TypeVar("ItemT")


@dataclass(frozen=True)
class ScoringWeights:
    """Validated weights: each in [0, 1], summing to at most 1; half-life > 0."""

    recency_weight: float = 0.0
    importance_weight: float = 0.0
    recency_half_life_seconds: float = 3600.0

    def __post_init__(self) -> None:
        fraction("recency_weight", self.recency_weight)
        fraction("importance_weight", self.importance_weight)
        positive_number("recency_half_life_seconds", self.recency_half_life_seconds)
        if self.recency_weight + self.importance_weight > 1.0 + 1e-9:
            raise InvalidValueError(
                "recency_weight + importance_weight must be <= 1, got "
                f"{self.recency_weight} + {self.importance_weight}"
            )

    @property
    def active(self) -> bool:
        """False when both weights are zero: ranking is similarity order, untouched."""
        return self.recency_weight > 0 or self.importance_weight > 0


@dataclass(frozen=True)
class Scored(Generic[ItemT]):
    """An item with the signals that ranked it."""

    item: ItemT
    similarity: float
    created_at: float
    importance: float = 1.0
    score: float = 0.0


def importance_of(metadata: Mapping[str, Any]) -> float:
    """``metadata["importance"]`` as a float; 1.0 when it is missing or not a finite
    number (a shared store may hold any JSON there: recall must not raise on it)."""
    value = metadata.get("importance", 1.0)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return 1.0
    try:
        number = float(value)
    except ValueError:
        return 1.0
    return number if math.isfinite(number) else 1.0


def blend(
    similarity: float, age_seconds: float, importance: float, weights: ScoringWeights
) -> float:
    """The weighted score of one item."""
    recency = 0.5 ** (max(0.0, age_seconds) / weights.recency_half_life_seconds)
    base = 1.0 - weights.recency_weight - weights.importance_weight
    return base * similarity + weights.recency_weight * recency + weights.importance_weight * importance


def rank(
    items: Sequence[Scored[ItemT]], weights: ScoringWeights, *, now: float | None = None
) -> list[Scored[ItemT]]:
    """Items re-ranked by :func:`blend`, best first (stable on ties).

    With inactive weights the input order is returned as is, each item's
    score being its similarity.
    """
    if not weights.active:
        return [Scored(s.item, s.similarity, s.created_at, s.importance, s.similarity) for s in items]
    moment = time.time() if now is None else now
    scored = [
        Scored(
            s.item,
            s.similarity,
            s.created_at,
            s.importance,
            blend(s.similarity, moment - s.created_at, s.importance, weights),
        )
        for s in items
    ]
    return sorted(scored, key=lambda s: s.score, reverse=True)
