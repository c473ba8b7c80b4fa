"""Recall of past messages: one pipeline, read top to bottom.

1. :mod:`.query`: the query is read once into a frozen :class:`RecallQuery`;
2. :mod:`.candidates`: the store's sides (dense, keywords, the time it names,
   entities) give :class:`Candidates`;
3. :mod:`.ranking`: one function ranks them, with the reason for each place;
4. :mod:`.pipeline`: the stages together, widening while too few are found.

Every weight is in :mod:`.weights`, every word of a language in :mod:`.words`,
the reading of dates in :mod:`.dates`; what the stores hold stays in
:mod:`fastaiagent.facts`. The things people talk about (people, pets, places)
are found and resolved in :mod:`.entities` and :mod:`.entity_book`, kept with
the messages by :mod:`.entity_store`; the query's side of them is the entity
side of :mod:`.candidates`.

Every door ranks through :func:`.ranking.rank`: ``VectorBlock`` (and so
``Memory(recall=...)``) through :func:`.pipeline.find`; ``Memory.retrieve(query)``
and the MCP ``retrieve`` tool through :func:`.facts.search_facts`; the plane and
the LangGraph store, which hold their candidates already, through
:func:`.given.rank_given`.
"""

from fastaiagent.recall.candidates import Candidates, Sides, gather
from fastaiagent.recall.pipeline import Settings, explain, find
from fastaiagent.recall.query import RecallQuery, read_query
from fastaiagent.recall.ranking import Ranked, rank
from fastaiagent.recall.weights import Ranking

__all__ = [
    "Candidates",
    "Ranked",
    "Ranking",
    "RecallQuery",
    "Settings",
    "Sides",
    "explain",
    "find",
    "gather",
    "rank",
    "read_query",
]
