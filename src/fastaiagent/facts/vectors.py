"""Durable recall: vectors, keyword postings and embeddings kept in the fact store.

A store that can hold them implements the :class:`HoldsVectors` capability:
``vector_store(dimension)`` returns a :class:`StoredVectorIndex` (one per vector
size: embedders of different sizes share the store, each size in an index of
its own; :class:`ListsDimensions` lists them), which is a
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
from typing import Any, Protocol, runtime_checkable

from fastaiagent._validate import text as check_text
from fastaiagent.facts.entities import entity_terms
from fastaiagent.kb.bm25 import tokenize
from fastaiagent.kb.identity import embedder_identity
from fastaiagent.kb.protocols import Chunk, SearchHit, VectorStore, check_top_k, wanted_keys

# A span holding more of a namespace's chunks than this is too broad to rank on its own
# (reading 10k ids costs ~10 ms): ``search_recorded`` then finds nothing.
RECORDED_LIMIT = 1000

Spans = Sequence[tuple[float, float]]
"""Spans of time, ``(start, end)`` in epoch seconds, end exclusive."""


def text_key(text: str) -> str:
    """The cache key of a text: its SHA-256, hex (the text itself is not stored twice)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def keyword_text(chunk: Chunk) -> str:
    """What a chunk's keyword postings index: its text, then ``metadata["context"]``
    when that is a str (recall stores the turn before a message there, which
    the in-process BM25 index has always indexed with it)."""
    context = chunk.metadata.get("context")
    return f"{chunk.text} {context}" if isinstance(context, str) and context else chunk.text


# Recall stores here the question a message answers (the previous message's last one).
REPLIES_TO_KEY = "replies_to"


def embedded_text(chunk: Chunk) -> str:
    """What a chunk's vector is made from: its text, then ``metadata["replies_to"]``
    when that is a str. An answer often says what it is about only beside its
    question ("They're the Aura 300, in sage green" after "Which headphones?");
    the text comes first, so a long question is what the model's window cuts."""
    question = chunk.metadata.get(REPLIES_TO_KEY)
    return with_question(chunk.text, question if isinstance(question, str) else None)


def with_question(text: str, question: str | None) -> str:
    """``text`` then the ``question`` it answers, the text :func:`embedded_text` embeds
    (``text`` alone when there is none): a turn's query is embedded as this too, so
    its vector is the one its message is stored with."""
    return f"{text} {question}" if question else text


ANALYZER_VERSION = 1
"""The version of what a chunk's keyword postings are made of (:func:`keyword_tokens`:
``kb.bm25.tokenize``, its stemmer and stop words, and the entity postings of
:func:`~fastaiagent.facts.entities.entity_term`). Raise it with any change to
them: each index records the version its postings were built with, and an
index opened with another one builds them again in the background
(:mod:`fastaiagent.facts.index.reindex`), as a changed embedder re-embeds."""


def keyword_tokens(chunk: Chunk) -> list[str]:
    """The keyword tokens a chunk is indexed under: :func:`keyword_text`, tokenized,
    then one posting per entity the chunk mentions (``metadata["entities"]``)."""
    return tokenize(keyword_text(chunk)) + entity_terms(chunk.metadata)


def recorded_at(chunk: Chunk) -> float | None:
    """The chunk's ``metadata["created_at"]`` as epoch seconds, None when it is not a
    finite number (a str or a bool is kept on write but never read as a time)."""
    at = chunk.metadata.get("created_at")
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        return None
    return float(at)


@runtime_checkable
class StoredVectorIndex(VectorStore, Protocol):
    """A VectorStore that lives in the fact store's database (see the module doc):
    ``search``, ``get``, ``delete`` and the rest as the VectorStore contract says
    (``add`` needs a namespace on every chunk; ``delete_namespace`` also drops the
    namespace's keyword postings and cached embeddings), plus what follows."""

    def keyword_search(self, query: str, top_k: int, *, namespace: str) -> list[tuple[str, float]]:
        """``(chunk id, score)`` of the ``top_k`` best keyword matches in ``namespace``,
        best first; scores are comparable within one call only."""
        ...

    def ids(self, namespace: str) -> set[str]:
        """Every chunk id ``namespace`` holds."""
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


class RecordedSearch:
    """The one ``search_recorded`` of the shipped indexes (:class:`ListsRecorded`): it
    checks the request; the backend implements :meth:`search_spans`."""

    def search_recorded(
        self, vector: Sequence[float], top_k: int, *, namespace: str, spans: Spans,
        include_untagged: bool = False,
    ) -> list[SearchHit]:
        """See :meth:`ListsRecorded.search_recorded`."""
        check_top_k(top_k)
        keys = wanted_keys(check_text("namespace", namespace), include_untagged)
        if top_k == 0 or not spans or keys is None:
            return []
        return self.search_spans(vector, top_k, keys, spans)

    def search_spans(
        self, vector: Sequence[float], top_k: int, keys: list[str], spans: Spans
    ) -> list[SearchHit]:
        """The backend's part of :meth:`search_recorded`: ``top_k`` >= 1, ``keys`` the
        namespace keys, ``spans`` not empty."""
        raise NotImplementedError


@runtime_checkable
class ListsRecorded(Protocol):
    """A StoredVectorIndex that can search the chunks recorded in spans of time."""

    def search_recorded(
        self, vector: Sequence[float], top_k: int, *, namespace: str, spans: Spans,
        include_untagged: bool = False,
    ) -> list[SearchHit]:
        """The ``top_k`` chunks of ``namespace`` closest by cosine among those whose
        ``metadata["created_at"]`` (epoch seconds, a number) falls in one of ``spans``
        (``(start, end)``, end exclusive), best first; none when more than
        :data:`RECORDED_LIMIT` chunks fall in them."""
        ...


@runtime_checkable
class ListsNewest(Protocol):
    """A StoredVectorIndex that pages a namespace newest first and names its
    namespaces (the shipped ones): what an operator's view of a user's recalled
    messages reads (:mod:`fastaiagent.facts.messages`)."""

    def newest(self, namespace: str, limit: int = 50, offset: int = 0) -> list[Chunk]:
        """Up to ``limit`` chunks of ``namespace`` (without vectors) after skipping
        ``offset``, newest first by a numeric ``metadata["created_at"]``, those
        without one after them."""
        ...

    def namespace_counts(self) -> dict[str, int]:
        """Every namespace that holds a chunk, with how many, in one read."""
        ...


@runtime_checkable
class HoldsVectors(Protocol):
    """A store capability: durable vectors and keyword postings next to the facts."""

    def vector_store(self, dimension: int | None = None) -> StoredVectorIndex:
        """The store-backed vector index on this store's own connections: the default
        one (``dimension`` None, or the size it holds or will hold), else the index
        of ``dimension``-sized vectors beside it."""
        ...


@runtime_checkable
class ListsDimensions(Protocol):
    """A HoldsVectors store that lists its indexes of every size (the shipped ones)."""

    def vector_dimensions(self) -> list[int]:
        """The vector sizes its indexes hold, read from the database."""
        ...

    def vector_indexes(self) -> list[StoredVectorIndex]:
        """Every size's index, the default one first."""
        ...


def every_vector_index(store: object) -> list[Any]:
    """Every size's index of a store (what a forget empties, what an export reads):
    all of a :class:`ListsDimensions` store's, the one of another HoldsVectors store,
    none otherwise."""
    if isinstance(store, ListsDimensions):
        return store.vector_indexes()
    return [store.vector_store()] if isinstance(store, HoldsVectors) else []


def recall_namespace(project_id: str, user_id: str) -> str:
    """The recall namespace of a user: ``user:<id>``, ``<project>:user:<id>`` in a project."""
    base = f"user:{user_id}"
    return f"{project_id}:{base}" if project_id else base


__all__ = [
    "ANALYZER_VERSION",
    "HoldsVectors",
    "ListsDimensions",
    "ListsNewest",
    "RecordedSearch",
    "Spans",
    "StoredVectorIndex",
    "embedded_text",
    "embedder_identity",
    "every_vector_index",
    "keyword_text",
    "keyword_tokens",
    "recall_namespace",
    "text_key",
    "with_question",
]
