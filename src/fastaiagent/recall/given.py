"""Recall over items a door already holds: the plane's facts, a LangGraph store's
items, the facts a semantic index found.

A door that has its candidates in hand gives them here as chunks (the text;
``metadata["created_at"]`` when it knows when each was said, ``"speaker"`` /
``"role"`` where it has them) with, when an embedder is there, each one's cosine
similarity to the query. :class:`Given` makes the keyword side over those texts
(BM25, scored as the stores' postings are); :func:`rank_given` ranks both sides
with the one ranking function (:func:`~.ranking.rank`) and the weights of
:mod:`.weights`, so the cues a query carries (the time it names, "now" / "at
first", a question, the speaker it asks about) order a door's answer as they order
a recall. The query is read once, by the door (:func:`~.query.read_query`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fastaiagent.kb.bm25 import BM25Index
from fastaiagent.kb.protocols import Chunk
from fastaiagent.recall.candidates import Candidates, Scored
from fastaiagent.recall.query import RecallQuery
from fastaiagent.recall.ranking import Ranked, rank
from fastaiagent.recall.weights import (
    BM25_B,
    BM25_K1,
    DEFAULT_DENSE_WEIGHT,
    DEFAULT_RANKING,
    Ranking,
)


class Given:
    """Chunks a door holds, with their keyword postings (each text tokenized once)."""

    def __init__(self, chunks: Iterable[Chunk]) -> None:
        self.chunks: dict[str, Chunk] = {chunk.id: chunk for chunk in chunks}
        self.keywords = BM25Index(k1=BM25_K1, b=BM25_B)
        for chunk_id, chunk in self.chunks.items():
            self.keywords.add(chunk_id, chunk.text)

    def share(self, query: RecallQuery) -> dict[str, float]:
        """Each chunk holding a query term: the share of the query's terms it holds,
        a similarity in [0, 1] that does not depend on the other chunks."""
        return self.keywords.share(query.terms) if query.terms else {}


def nothing_after(_ids: Sequence[str]) -> list[Chunk]:
    """What follows a hit among items a door holds: nothing (facts and items are not
    turns of a conversation; the ranking's following step reads none)."""
    return []


def rank_given(
    query: RecallQuery,
    given: Given,
    dense: Sequence[Scored] | None = None,
    *,
    ranking: Ranking = DEFAULT_RANKING,
    dense_weight: float = DEFAULT_DENSE_WEIGHT,
) -> list[Ranked]:
    """Every chunk of ``given``, best first for ``query``. ``dense``: the cosine
    similarity of chunks to the query, by id (None: no embedder; keywords lead
    alone). A chunk neither side found comes last, in the order given, unscored."""
    keyword = given.keywords.search_terms(query.terms, len(given.chunks)) if query.terms else []
    dense = tuple(dense or ())
    candidates = Candidates(
        given.chunks, dense, keyword=tuple(keyword), keyword_complete=True, exhausted=True
    )
    speakers = {s for c in given.chunks.values() if isinstance(s := c.metadata.get("speaker"), str)}
    ranked = rank(
        candidates, query, ranking, dense_weight=dense_weight if dense else 0.0,
        fetch=nothing_after, namespace="", speaker=query.about(speakers) if ranking.participant else None,
    )  # fmt: skip
    found = {r.chunk.id for r in ranked}
    return ranked + [Ranked(c, 0.0) for i, c in given.chunks.items() if i not in found]


__all__ = ["Given", "nothing_after", "rank_given"]
