"""A door's own items rank through recall: the keyword side scores them as a BM25
index over the same texts does, each side puts only its best forward, and the
rest keep the door's order."""

from __future__ import annotations

import pytest

from fastaiagent.kb.bm25 import BM25Index
from fastaiagent.recall.given import Given, rank_given
from fastaiagent.recall.query import read_query

TEXTS = [
    "The support desk opens at nine",
    "Refunds go back to the card used for the order",
    "Orders ship from Lyon on weekdays",
    "Password resets are sent by email",
    "Refund requests need the order number",
]


def test_keyword_side_scores_as_a_bm25_index_and_share_is_the_words_held():
    query = read_query("refund for my order", now=0.0)
    index = BM25Index()
    for n, text in enumerate(TEXTS):
        index.add(str(n), text)
    given = Given(TEXTS)
    assert given.keyword(query) == pytest.approx(dict(index.search("refund for my order", 10)))
    assert given.share(query) == {"1": 1.0, "2": 0.5, "4": 1.0}


def test_only_each_sides_best_are_ranked_the_rest_keep_the_doors_order():
    query = read_query("refund order", now=0.0)
    rest = ["3", "0", "2", "4", "1"]
    order = [r.chunk.id for r in rank_given(query, Given(TEXTS), fetch=1, rest=rest)]
    best = order[0]
    assert best in {"1", "4"}  # the best keyword hit leads
    assert order[1:] == [i for i in rest if i != best]


def test_chunks_carry_their_time_for_the_time_cues():
    given = Given(["older plan", "newer plan"], [100.0, 200.0])
    assert given.chunks["1"].metadata == {"created_at": 200.0}
    now = read_query("what is the plan now?", now=300.0)
    assert [r.chunk.text for r in rank_given(now, given)] == ["newer plan", "older plan"]
