"""Durable recall: vectors, keyword postings and embeddings kept in the fact store.

A store that can hold them implements the :class:`HoldsVectors` capability:
``vector_store()`` returns a :class:`StoredVectorIndex`, which is a
:class:`~fastaiagent.kb.protocols.VectorStore` (so ``VectorBlock`` and the
semantic fact index use it as they use FAISS) plus what makes recall outlive
the process:

- ``keyword_search``: the keyword side of hybrid retrieval, persisted next to
  the vectors (SQLite FTS5, Postgres full text, a Redis structure), so hybrid
  fusion needs no in-process index rebuilt after a restart;
- ``ids``: which chunk ids a namespace already holds, so nothing is indexed twice;
- an embedding cache keyed by the embedder's identity (model name + dimension)
  and the text's hash, so each text is embedded once, ever, whatever the number
  of restarts and workers; vectors of another embedder are never mixed in;
- optionally ``search_recorded`` (:class:`ListsRecorded`): the closest chunks
  among those recorded in spans of time, read through an index on
  ``metadata["created_at"]`` (SQLite, Postgres, Redis), so a question naming a time
  ranks that time's messages even when no word matches.

Namespaces isolate users exactly as the in-process stores do (``user:<id>``,
``<project>:user:<id>``); ``delete_namespace`` is what ``forget`` calls.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from fastaiagent.kb.protocols import Chunk, SearchHit, VectorStore

# A span holding more of a namespace's chunks than this is too broad to rank on its own
# (reading 10k ids costs ~10 ms): ``search_recorded`` then finds nothing.
RECORDED_LIMIT = 1000


def text_key(text: str) -> str:
    """The cache key of a text: its SHA-256, hex (the text itself is not stored twice)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def keyword_text(chunk: Chunk) -> str:
    """What a chunk's keyword postings index: its text, then ``metadata["context"]``
    when that is a str (recall stores the turn before a message there, which
    the in-process BM25 index has always indexed with it)."""
    context = chunk.metadata.get("context")
    return f"{chunk.text} {context}" if isinstance(context, str) and context else chunk.text


def recorded_at(chunk: Chunk) -> float | None:
    """The chunk's ``metadata["created_at"]`` as epoch seconds, None when it is not a
    finite number (a str or a bool is kept on write but never read as a time)."""
    at = chunk.metadata.get("created_at")
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        return None
    return float(at)


def embedder_identity(model: str, dimension: int) -> str:
    """``<model>@<dimension>``: vectors are cached and searched per identity."""
    return f"{model}@{dimension}"


@runtime_checkable
class StoredVectorIndex(VectorStore, Protocol):
    """A VectorStore that lives in the fact store's database (see the module doc)."""

    @property
    def dimension(self) -> int | None: ...

    def add(self, chunks: Sequence[Chunk]) -> None:
        """Insert or replace ``chunks`` (each needs a vector and a namespace)."""
        ...

    def search(
        self,
        vector: Sequence[float],
        top_k: int = 5,
        *,
        namespace: str | None = None,
        include_untagged: bool = False,
    ) -> list[SearchHit]:
        """The ``top_k`` chunks of ``namespace`` closest by cosine, best first."""
        ...

    def keyword_search(self, query: str, top_k: int, *, namespace: str) -> list[tuple[str, float]]:
        """``(chunk id, score)`` of the ``top_k`` best keyword matches in ``namespace``,
        best first; scores are comparable within one call only."""
        ...

    def ids(self, namespace: str) -> set[str]:
        """Every chunk id ``namespace`` holds."""
        ...

    def get(self, ids: Sequence[str]) -> list[Chunk]:
        """The chunks with these ids (missing ones left out)."""
        ...

    def delete(self, ids: Sequence[str]) -> int:
        """Delete chunks by id; returns how many were there."""
        ...

    def delete_namespace(self, namespace: str) -> int:
        """Delete every chunk (vectors, keyword postings, cached embeddings) of ``namespace``."""
        ...

    def cached_embeddings(
        self, identity: str, namespace: str, keys: Sequence[str]
    ) -> dict[str, list[float]]:
        """Cached vectors of ``identity`` for these text keys (:func:`text_key`) in
        ``namespace`` (the cache is per namespace, so forgetting a user clears it)."""
        ...

    def cache_embeddings(
        self, identity: str, namespace: str, vectors: Mapping[str, Sequence[float]]
    ) -> None:
        """Remember vectors of ``identity`` by text key in ``namespace``."""
        ...

    def close(self) -> None:
        """Release what the index opened itself (the fact store's connections stay)."""
        ...


@runtime_checkable
class ListsRecorded(Protocol):
    """A StoredVectorIndex that can search the chunks recorded in spans of time."""

    def search_recorded(
        self,
        vector: Sequence[float],
        top_k: int,
        *,
        namespace: str,
        spans: Sequence[tuple[float, float]],
        include_untagged: bool = False,
    ) -> list[SearchHit]:
        """The ``top_k`` chunks of ``namespace`` closest by cosine among those whose
        ``metadata["created_at"]`` (epoch seconds, a number) falls in one of ``spans``
        (``(start, end)``, end exclusive), best first; none when more than
        :data:`RECORDED_LIMIT` chunks fall in them."""
        ...


@runtime_checkable
class HoldsVectors(Protocol):
    """A store capability: durable vectors and keyword postings next to the facts."""

    def vector_store(self) -> StoredVectorIndex:
        """The store-backed vector index on this store's own connections."""
        ...


__all__ = ["HoldsVectors", "StoredVectorIndex", "embedder_identity", "keyword_text", "text_key"]
