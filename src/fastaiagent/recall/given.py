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

import heapq
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from operator import itemgetter

from fastaiagent.kb.bm25 import bm25_scores, tokenize
from fastaiagent.kb.protocols import Chunk
from fastaiagent.recall.candidates import Candidates, Scored
from fastaiagent.recall.kept import kept_for_short_texts
from fastaiagent.recall.query import RecallQuery
from fastaiagent.recall.ranking import Ranked, rank
from fastaiagent.recall.weights import (
    BM25_B,
    BM25_K1,
    DEFAULT_DENSE_WEIGHT,
    FACT_RANKING,
    Ranking,
)

# Texts whose terms are kept between requests: a door ranks the same facts and items
# again and again (the plane reads up to 1,000 per request), and tokenizing them is
# most of the keyword side's work.
TERMS_KEPT = 8192


@kept_for_short_texts(TERMS_KEPT)
def _counted(text: str) -> tuple[Counter[str], int]:
    """A text's terms (:func:`~fastaiagent.kb.bm25.tokenize`) with their counts, and its length in terms."""
    counts = Counter(tokenize(text))
    return counts, sum(counts.values())


class Given:
    """Texts a door holds, by position (chunk ids ``"0"``, ``"1"``, ...), with their
    terms (read once per text, kept between requests). ``said_at``: when each was
    said or written (epoch seconds), for the time cues. A chunk is made only for
    what is ranked: a door gives every item, the sides put a few forward."""

    def __init__(self, texts: Sequence[str], said_at: Sequence[float | None] | None = None) -> None:
        self.texts, self.said_at = texts, said_at
        ids = [str(n) for n in range(len(texts))]
        counted = [_counted(text) for text in texts]
        self._counts = [(chunk_id, counts) for chunk_id, (counts, _) in zip(ids, counted, strict=True)]
        self._lengths = {chunk_id: length for chunk_id, (_, length) in zip(ids, counted, strict=True)}
        self._total_length = sum(self._lengths.values())
        self._postings: tuple[frozenset[str], dict[str, dict[str, int]]] | None = None
        self.chunks: Mapping[str, Chunk] = _Chunks(self)
        """Each text as a chunk (``metadata["created_at"]``: its time), made when read."""

    def postings(self, query: RecallQuery) -> dict[str, dict[str, int]]:
        """Each term of ``query`` held by a chunk: those chunks and its count there."""
        terms = frozenset(query.terms)
        if self._postings is None or self._postings[0] != terms:
            found: dict[str, dict[str, int]] = {term: {} for term in terms}
            for chunk_id, counts in self._counts:
                for term in terms:
                    if tf := counts.get(term):
                        found[term][chunk_id] = tf
            self._postings = terms, {term: docs for term, docs in found.items() if docs}
        return self._postings[1]

    def share(self, query: RecallQuery) -> dict[str, float]:
        """Each chunk holding a query term: the share of the query's terms it holds,
        a similarity in [0, 1] that does not depend on the other chunks."""
        wanted = len(set(query.terms))
        held: dict[str, int] = {}
        for docs in self.postings(query).values():
            for chunk_id in docs:
                held[chunk_id] = held.get(chunk_id, 0) + 1
        return {chunk_id: count / wanted for chunk_id, count in held.items()}

    def keyword(self, query: RecallQuery) -> dict[str, float]:
        """The BM25 score of each chunk holding a query term, scored over every chunk
        given as the stores' postings are scored."""
        postings = self.postings(query)
        if not postings:
            return {}
        return bm25_scores(postings, self._lengths, self._total_length, BM25_K1, BM25_B)


class _Chunks(Mapping[str, Chunk]):
    def __init__(self, given: Given) -> None:
        self.given = given

    def __getitem__(self, chunk_id: str) -> Chunk:
        n, given = int(chunk_id), self.given
        said = None if given.said_at is None else given.said_at[n]
        return Chunk(chunk_id, given.texts[n], metadata={} if said is None else {"created_at": said})

    def __iter__(self) -> Iterator[str]:
        return (str(n) for n in range(len(self.given.texts)))

    def __len__(self) -> int:
        return len(self.given.texts)


def nothing_after(_ids: Sequence[str]) -> list[Chunk]:
    """What follows a hit among items a door holds: nothing (facts and items are not
    turns of a conversation; the ranking's following step reads none)."""
    return []


def rank_given(
    query: RecallQuery,
    given: Given,
    dense: Sequence[Scored] | None = None,
    *,
    fetch: int | None = None,
    rest: Iterable[str] | None = None,
    ranking: Ranking = FACT_RANKING,
    dense_weight: float = DEFAULT_DENSE_WEIGHT,
) -> Iterator[Ranked]:
    """Every chunk of ``given``, best first for ``query`` (read as far as the door
    wants). ``dense``: the cosine similarity of chunks to the query, by id (None: no
    embedder; keywords lead alone). ``fetch``: how many of each side's best are
    ranked (None: all), as a store's sides give recall ``fetch`` candidates each. A
    chunk neither side put among its best comes after them, unscored, in the door's
    own order: ``rest`` (ids), else the order given."""
    keyword = given.keyword(query)
    best_keyword = _best(keyword.items(), fetch)
    best_dense = _best(dense or (), fetch)
    candidates = Candidates(
        given.chunks, tuple(best_dense), keyword=tuple(best_keyword),
        keyword_complete=len(best_keyword) == len(keyword), exhausted=True,
    )  # fmt: skip
    speaker = None
    if ranking.participant:
        speaker = query.about({s for c in given.chunks.values() if isinstance(s := c.metadata.get("speaker"), str)})
    ranked = rank(
        candidates, query, ranking, dense_weight=dense_weight if dense else 0.0,
        fetch=nothing_after, namespace="", speaker=speaker,
    )  # fmt: skip
    yield from ranked
    found, chunks = {r.chunk.id for r in ranked}, given.chunks
    yield from (Ranked(chunks[i], 0.0) for i in (chunks if rest is None else rest) if i not in found)


def _best(scored: Iterable[Scored], fetch: int | None) -> list[Scored]:
    """The ``fetch`` best of ``scored`` (all when None), best first."""
    if fetch is None:
        return sorted(scored, key=_SCORE, reverse=True)
    return heapq.nlargest(fetch, scored, key=_SCORE)


_SCORE = itemgetter(1)


__all__ = ["TERMS_KEPT", "Given", "nothing_after", "rank_given"]
