"""Durable facts by meaning, ranked by the recall pipeline.

``Memory.retrieve(query)`` (and so the MCP ``retrieve`` tool) asks here: the
query is read once (:func:`~.query.read_query`), the fact index's sides find
their candidates (:meth:`~fastaiagent.facts.semantic.SemanticFactIndex.find`:
cosine and BM25 over the subject's facts), the one ranking function orders them
(:func:`~.ranking.rank`, the weights of :mod:`.weights`), and the best are read
back from the fact store, active and valid
(:meth:`~fastaiagent.facts.semantic.SemanticFactIndex.verified`). The cues of the
query order facts as they order messages: "now" (or "at first") raises the newer
(older) of two facts on the same thing, a time it names raises the facts recorded
then, a fact that asks ranks lower. Facts indexed before their record time was
kept with their vectors have no time: those cues pass them by.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fastaiagent.facts.fact import Fact
from fastaiagent.facts.scoping import check_limit
from fastaiagent.recall.candidates import Candidates
from fastaiagent.recall.given import nothing_after
from fastaiagent.recall.query import read_query
from fastaiagent.recall.ranking import Reason, rank
from fastaiagent.recall.weights import FACT_RANKING, FETCH_FACTOR

if TYPE_CHECKING:  # the index is made on first use (Memory(semantic=...))
    from fastaiagent.facts.semantic import SemanticFactIndex, Subject


def search_facts(
    index: SemanticFactIndex,
    query: str,
    scope: str,
    scope_id: str,
    project_id: str = "",
    limit: int = 10,
    *,
    now: float | None = None,
    include_expired: bool = False,
) -> list[tuple[Fact, tuple[Reason, ...]]]:
    """The ``limit`` active facts of the subject most relevant to ``query``, best
    first, each with the reasons it ranked there; only those valid at ``now``
    (default: the current time) unless ``include_expired``. An empty id at
    user/project scope returns [] (never another user's facts); ``"*"`` searches
    every subject of the scope."""
    check_limit(limit)
    if limit == 0:
        return []
    hits = index.find(query, scope, scope_id, project_id, limit * FETCH_FACTOR)
    if not hits.chunks:
        return []
    asked = time.time() if now is None else now
    read = read_query(query, now=asked)
    candidates = Candidates(
        hits.chunks, tuple(hits.dense), keyword=tuple(hits.keyword),
        keyword_complete=hits.keyword_complete, exhausted=True,
    )  # fmt: skip
    ranked = rank(
        candidates, read, FACT_RANKING, retrieval=index.retrieval, dense_weight=index.dense_weight,
        fetch=nothing_after, namespace="", speaker=None,
    )  # fmt: skip
    reasons: dict[int, tuple[Reason, ...]] = {}

    def best_first() -> Iterator[tuple[Subject, int]]:  # read as far as verified wants
        for found in ranked:
            subject, fact_id = hits.owners[found.chunk.id]
            reasons[fact_id] = found.reasons
            yield subject, fact_id

    facts = index.verified(best_first(), limit, None if include_expired else asked)
    return [(fact, reasons[fact.id]) for fact in facts if fact.id is not None]


__all__ = ["search_facts"]
