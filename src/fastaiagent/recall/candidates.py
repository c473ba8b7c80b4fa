"""Candidates for a recall query, from the store's sides: by meaning, by keywords,
among the messages of the time the query names, and (when the query mentions
entities) by the entity side.

The sides are the store's (what it holds stays in ``facts/``); :class:`Sides`
is what the pipeline asks of them, and ``VectorBlock`` answers it. The result is
one frozen :class:`Candidates`: every candidate's chunk by id and what each side
scored it, for :mod:`.ranking` to read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from fastaiagent._beside import beside
from fastaiagent.kb.protocols import Chunk
from fastaiagent.recall.dates import Span
from fastaiagent.recall.query import RecallQuery
from fastaiagent.recall.weights import Ranking

Scored = tuple[str, float]
"""``(chunk id, score)``."""
ChunksById = Callable[[list[str]], dict[str, Chunk]]


class Sides(Protocol):
    """The searches a store offers recall (``VectorBlock`` implements them)."""

    @property
    def finds_recorded(self) -> bool:
        """Whether :meth:`dense` can also list the messages of given spans of time."""

    @property
    def keywords_wait(self) -> bool:
        """Whether the keyword side waits on a database (it then runs beside the dense side)."""

    @property
    def reads_cjk(self) -> bool:
        """Whether the embedding model was trained on Chinese, Japanese and Korean."""

    def dense(
        self, text: str, fetch: int, spans: Sequence[Span] = (), message: str | None = None
    ) -> tuple[list[tuple[Chunk, float]], list[tuple[Chunk, float]], bool]:
        """The ``fetch`` closest chunks to ``text``; the closest of those said in
        ``spans``; whether the namespace is exhausted. ``message`` is embedded in the
        same call (the turn stores it next)."""

    def keyword(self, text: str, fetch: int) -> tuple[list[Scored], ChunksById]:
        """The keyword ranking of ``text``, and how to read its chunks."""

    def entities(self, text: str, fetch: int) -> tuple[frozenset[str], list[Scored]]:
        """The ids of the entities ``text`` names in the user's book, and the ``fetch``
        best of the user's messages mentioning them (none where the store keeps no book)."""

    def get(self, ids: Sequence[str]) -> list[Chunk]:
        """Chunks by id (not scoped: the caller keeps its namespace's)."""


@dataclass(frozen=True)
class Candidates:
    """What the searches found for one query."""

    chunks: Mapping[str, Chunk]
    """Every candidate's chunk by id."""
    dense: tuple[Scored, ...]
    """Cosine similarity, by meaning."""
    recorded: tuple[Scored, ...] = ()
    """Cosine similarity among the messages said in the time the query names."""
    keyword: tuple[Scored, ...] = ()
    """BM25 score."""
    entity: tuple[Scored, ...] = ()
    """BM25 score of a search of the entity postings of the entities the query names."""
    entities: frozenset[str] = frozenset()
    """Ids of the entities the query names, in the user's book."""
    keyword_complete: bool = False
    """Every message holding a query term is in ``keyword``."""
    dense_share: float = 1.0
    """The share of the dense weight the dense side keeps for this query."""
    exhausted: bool = False
    """A wider search would find nothing more."""


def gather(query: RecallQuery, sides: Sides, fetch: int, retrieval: str, ranking: Ranking) -> Candidates:
    """The candidates of ``query`` for ``retrieval`` (``"hybrid"``, ``"dense"`` or
    ``"bm25"``), ``fetch`` from each side."""
    if retrieval == "dense":
        dense, _, exhausted = sides.dense(query.said, fetch)
        return Candidates({c.id: c for c, _ in dense}, _ids(dense), exhausted=exhausted)
    if retrieval == "bm25":
        keyword, read = sides.keyword(query.text, fetch)
        found = read([i for i, _ in keyword])
        kept = tuple((i, s) for i, s in keyword if i in found)
        return Candidates(found, (), keyword=kept, exhausted=len(keyword) < fetch)
    return _hybrid(query, sides, fetch, ranking)


def _hybrid(query: RecallQuery, sides: Sides, fetch: int, ranking: Ranking) -> Candidates:
    # A store's keyword side waits on the database: it runs beside the dense side.
    pending = beside(sides.keyword, query.text, fetch) if sides.keywords_wait else None
    when = query.when if ranking.date else None
    spans = when.ranges(query.now) if when is not None and sides.finds_recorded else ()
    # A name tells the embedding model little but "a person": embed the rest.
    dense, recorded, exhausted = sides.dense(query.embedded, fetch, spans, query.said)
    keyword, read = pending.result() if pending is not None else sides.keyword(query.text, fetch)
    # The entity side: the user's messages, in any session, about the people and
    # things the query names (by name, alias or description).
    named, entity = sides.entities(query.text, fetch)
    by_id = {chunk.id: chunk for chunk, _ in recorded}
    by_id.update((chunk.id, chunk) for chunk, _ in dense)
    wanted = list(dict.fromkeys(i for i, _ in [*keyword, *entity] if i not in by_id))
    by_id.update(read(wanted))
    share = ranking.unread_script_dense_share if query.script == "cjk" and not sides.reads_cjk else 1.0
    return Candidates(
        by_id,
        _ids(dense),
        recorded=_ids(recorded),
        keyword=tuple((i, s) for i, s in keyword if i in by_id),  # deleted meanwhile: left out
        entity=tuple((i, s) for i, s in entity if i in by_id),
        entities=named,
        keyword_complete=len(keyword) < fetch,
        dense_share=share,
        exhausted=exhausted,
    )


def _ids(pairs: Sequence[tuple[Chunk, float]]) -> tuple[Scored, ...]:
    return tuple((chunk.id, score) for chunk, score in pairs)


__all__ = ["Candidates", "Scored", "Sides", "gather"]
