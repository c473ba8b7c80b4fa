"""BM25 for keyword search inside a store, with one namespace's own statistics.

Each index scores about :func:`budget` documents of a search, picked the same way
(:func:`by_rarity`): every document holding the query's rarest terms, then the
newest holding the others (SQLite's and Postgres' full-text indexes find them,
Redis reads the terms' postings); all three score them
here (:func:`bm25_top`, with the formula of :mod:`fastaiagent.kb.bm25`) with the namespace's
document count, token total and per-term document counts, so a user's ranking
never depends on what other users said. The formula is
:class:`~fastaiagent.kb.bm25.BM25Index`'s (Okapi BM25, k1 1.2, b 0.75), so durable
and in-process recall rank alike.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence

from fastaiagent._validate import text as check_text
from fastaiagent.kb.bm25 import length_norm, term_gain, tokenize
from fastaiagent.kb.protocols import check_top_k

Row = tuple[str, int, Mapping[str, int]]  # chunk id, length in tokens, counts of query terms


def query_terms(query: str, top_k: int, namespace: str) -> list[str]:
    """The checked request of a ``keyword_search``: the query's distinct terms,
    sorted ([] when there is nothing to search)."""
    check_top_k(top_k)
    check_text("query", query, allow_empty=True)
    check_text("namespace", namespace)
    return sorted(set(tokenize(query))) if top_k else []


def grouped(postings: Iterable[tuple[str, int, str | None, int]]) -> list[Row]:
    """Rows for :func:`bm25_top` from postings ``(chunk id, its length, a query term
    it holds or None, that term's count)``, a chunk's postings gathered."""
    rows: dict[str, tuple[int, dict[str, int]]] = {}
    for chunk_id, length, term, tf in postings:
        counts = rows.setdefault(chunk_id, (length, {}))[1]
        if term is not None:
            counts[term] = tf
    return [(chunk_id, length, counts) for chunk_id, (length, counts) in rows.items()]


CANDIDATES = 200
"""Documents a keyword search scores, at least (:func:`budget`)."""


def budget(top_k: int) -> int:
    """How many documents a search for ``top_k`` scores."""
    return max(CANDIDATES, 4 * top_k)


def by_rarity(frequency: Mapping[str, int], budget: int) -> tuple[list[str], list[str]]:
    """``(rare, common)`` query terms for a search that scores about ``budget``
    documents: the rarest terms (fewest documents first) while their documents
    fit in the budget, then the rest; terms no document holds are left out. The
    rare terms carry BM25's weight, so every document holding one is scored; of
    the common terms' documents a search scores the newest."""
    rare: list[str] = []
    common: list[str] = []
    postings = 0
    for term in sorted((t for t in frequency if frequency[t]), key=frequency.__getitem__):
        if postings + frequency[term] <= budget:
            rare.append(term)
            postings += frequency[term]
        else:
            common.append(term)
    return rare, common


def newest_window(wanted: int, docs: int, held: int) -> int:
    """How many of a namespace's newest documents to read to find about ``wanted``
    holding a common term (``held``: the documents holding one, at most): twice the
    expected count, at most ``docs``; a reader that found too few reads 4x more."""
    return min(docs, max(wanted, 2 * wanted * docs // max(held, 1)))


def bm25_top(
    frequency: Mapping[str, int],
    rows: Sequence[Row],
    docs: int,
    tokens: int,
    top_k: int,
) -> list[tuple[str, float]]:
    """The ``top_k`` best of ``rows`` (id, document length in tokens, term counts of
    at least the query terms), best first, for the query terms of ``frequency``
    (term -> documents of the namespace holding it), among ``docs`` documents
    of ``tokens`` tokens in all."""
    if docs <= 0:
        return []
    base, slope = length_norm(docs, tokens)
    gains = [(term, term_gain(docs, df)) for term, df in frequency.items() if df]
    scores = []
    for chunk_id, length, counts in rows:
        norm = base + slope * length
        score = 0.0
        for term, weight in gains:
            if tf := counts.get(term, 0):
                score += weight * tf / (tf + norm)
        # Higher score first; equal scores (to 1e-9: the sums' order differs between stores)
        # by id, so every store returns the same documents in the same order.
        scores.append((-round(score, 9), chunk_id, score))
    return [(chunk_id, score) for _, chunk_id, score in heapq.nsmallest(top_k, scores)]


__all__ = [
    "CANDIDATES", "bm25_top", "budget", "by_rarity", "grouped", "newest_window", "query_terms",
]  # fmt: skip
