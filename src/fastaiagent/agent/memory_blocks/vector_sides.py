"""A VectorBlock's store as the recall pipeline's sides (:class:`~fastaiagent.recall.Sides`).

The pipeline (:mod:`fastaiagent.recall`) asks for candidates by meaning, by
keywords and among the messages of a time; this adapter answers from the block's
store: its vector search (leaving out vectors of an earlier embedder, which are
re-embedded in the background), its ``search_recorded`` where it lists messages by
time, and its keyword postings, or the block's in-process BM25 index where it has none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fastaiagent._beside import beside
from fastaiagent.facts.index.embedding_cache import holds_cache, identity_of
from fastaiagent.facts.index.reembed import foreign, reembed_in_background
from fastaiagent.kb.protocols import Chunk, SearchHit
from fastaiagent.recall.dates import Span
from fastaiagent.recall.entity_store import entity_candidates
from fastaiagent.recall.weights import RECORDED_SHARE

if TYPE_CHECKING:
    from fastaiagent.agent.memory_blocks.vector import VectorBlock

Pairs = list[tuple[Chunk, float]]


class StoreSides:
    """The searches of ``block``'s store, for one recall."""

    def __init__(self, block: VectorBlock) -> None:
        self._block = block
        self._store: Any = block.store

    @property
    def finds_recorded(self) -> bool:
        """A store that lists chunks by when they were recorded (``search_recorded``)
        lets a query naming a time rank that time's messages when no word matches."""
        return callable(getattr(self._store, "search_recorded", None))

    @property
    def keywords_wait(self) -> bool:
        """A store that keeps keyword postings serves the keyword side itself (and
        waits on its database): no in-process BM25 to rebuild after a restart."""
        return callable(getattr(self._store, "keyword_search", None))

    @property
    def reads_cjk(self) -> bool:
        return bool(getattr(self._block.embedder, "understands_cjk", True))

    def dense(
        self, text: str, fetch: int, spans: Sequence[Span] = (), message: str | None = None
    ) -> tuple[Pairs, Pairs, bool]:
        """The ``fetch`` closest chunks; the closest of those recorded in ``spans``;
        whether the namespace is exhausted (fewer than ``fetch`` found).

        ``message``: the user's message when it differs from ``text`` (names taken
        out), embedded in the same call: the turn records it next, and a store
        that caches vectors then finds it there instead of embedding it again."""
        block = self._block
        vector = block.embed([text] if message in (None, text) else [text, message])[0]
        pending = beside(self._recorded, vector, fetch, spans) if spans else None
        hits = self._store.search(vector, fetch, namespace=block.namespace, include_untagged=block.reads_untagged)
        recorded = pending.result() if pending is not None else []
        if holds_cache(self._store):  # durable: may hold vectors of an earlier model
            identity = identity_of(block.embedder)
            kept = [hit for hit in hits if not foreign(hit.chunk.metadata, identity)]
            recorded = [hit for hit in recorded if not foreign(hit.chunk.metadata, identity)]
            if len(kept) < len(hits):  # never ranked against this model's query
                reembed_in_background(self._store, block.embedder, block.namespace)
            hits = kept
        # Counted after an earlier model's vectors are left out: a recall during a
        # re-embedding does not widen its search over vectors it cannot rank.
        exhausted = len(hits) < fetch
        return [(h.chunk, h.score) for h in hits], [(h.chunk, h.score) for h in recorded], exhausted

    def _recorded(self, vector: list[float], fetch: int, spans: Sequence[Span]) -> list[SearchHit]:
        return self._store.search_recorded(
            vector,
            max(1, int(fetch * RECORDED_SHARE)),
            namespace=self._block.namespace,
            spans=spans,
            include_untagged=self._block.reads_untagged,
        )

    def keyword(self, text: str, fetch: int) -> tuple[list[tuple[str, float]], Callable[[list[str]], dict[str, Chunk]]]:
        """The keyword ranking, from the store's postings or the in-process BM25, and
        how to read its chunks (one ``get`` from the store, or the in-process map)."""
        if self.keywords_wait:
            found = self._store.keyword_search(text, fetch, namespace=self._block.namespace)
            return [(i, float(s)) for i, s in found], self._read
        index, known = self._block.keyword_index()
        return index.search(text, fetch), lambda ids: {i: known[i] for i in ids if i in known}

    def _read(self, ids: list[str]) -> dict[str, Chunk]:
        return {c.id: c for c in self._store.get(ids)} if ids else {}

    def entities(self, text: str, fetch: int) -> tuple[frozenset[str], list[tuple[str, float]]]:
        """The entity side, from the store's book of the user's entities and its
        entity postings; nothing for a store without postings (FAISS, Qdrant ...)."""
        if not callable(getattr(self._store, "score_keywords", None)):
            return frozenset(), []
        found = entity_candidates(self._store, self._block.namespace, text, fetch)
        return found.entities, found.hits

    def get(self, ids: Sequence[str]) -> list[Chunk]:
        """Chunks by id (not scoped: the pipeline keeps the namespace's)."""
        return list(self._store.get(list(ids)))


__all__ = ["StoreSides"]
