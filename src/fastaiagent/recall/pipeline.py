"""The recall pipeline, top to bottom: read the query once, gather candidates,
rank them, keep those outside the window, widen while too few are left.

``VectorBlock.recall`` calls :func:`find` (``Memory(recall=...)`` builds one
block per user, so it recalls through here too); the block adds the memory-wide
recency and importance blend on top. Each stage is its own module:

- :mod:`.query`: the query, read once (:func:`~.query.read_query`);
- :mod:`.candidates`: the store's sides searched (:func:`~.candidates.gather`);
- :mod:`.ranking`: one ranking function (:func:`~.ranking.rank`), with reasons;
- :mod:`.weights`: every weight; :mod:`.words`: every word of a language.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from fastaiagent.facts.scoping import normalize_text
from fastaiagent.kb.protocols import Chunk
from fastaiagent.recall.candidates import Sides, gather
from fastaiagent.recall.query import RecallQuery
from fastaiagent.recall.ranking import Ranked, Reason, rank
from fastaiagent.recall.weights import FETCH_FACTOR, Ranking

Said = tuple[str, str]
"""``(role, normalised text)`` of a message in the window."""


@dataclass(frozen=True)
class Settings:
    """How a block searches and ranks (from its ``RecallOptions``)."""

    retrieval: str
    dense_weight: float
    ranking: Ranking
    top_k: int
    namespace: str


def find(
    query: RecallQuery,
    sides: Sides,
    settings: Settings,
    *,
    window: Collection[Said] = (),
    needed: int | None,
    speakers: Callable[[Iterable[Chunk]], set[str]],
) -> list[Ranked]:
    """The ranked candidates of ``query`` that are not in ``window``: the first
    ``needed`` (all when None), widening the search until ``top_k`` are found or
    the namespace is exhausted. ``speakers`` learns the speakers of the candidates
    and returns every known one (whom the query asks about is among them)."""
    fetch = settings.top_k * FETCH_FACTOR + len(window)
    while True:
        candidates = gather(query, sides, fetch, settings.retrieval, settings.ranking)
        known = speakers(candidates.chunks.values())
        speaker = query.about(known) if settings.ranking.participant else None
        ranked = rank(
            candidates, query, settings.ranking, retrieval=settings.retrieval,
            dense_weight=settings.dense_weight, fetch=sides.get,
            namespace=settings.namespace, speaker=speaker,
        )  # fmt: skip
        kept = outside(ranked, window, needed)
        if len(kept) >= settings.top_k or candidates.exhausted:
            return kept
        fetch *= 2


def outside(ranked: Iterable[Ranked], window: Collection[Said], needed: int | None) -> list[Ranked]:
    """The ranked candidates not in the window, in order; the first ``needed`` only."""
    kept: list[Ranked] = []
    for found in ranked:
        role = found.chunk.metadata.get("role")  # store data: a role that is not a str is no window's
        if window and isinstance(role, str) and (role, normalize_text(found.chunk.text)) in window:
            continue
        kept.append(found)
        if needed is not None and len(kept) >= needed:
            break
    return kept


def explain(reasons: Iterable[Reason]) -> str:
    """One line of why a result ranked where it did (its :attr:`Ranked.reasons`):
    ``fused +0.82, speaker +1.50``."""
    return ", ".join(f"{step} {amount:+.2f}" for step, amount in reasons)


__all__ = ["Settings", "explain", "find", "outside"]
