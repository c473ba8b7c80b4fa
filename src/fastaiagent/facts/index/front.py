"""The public side the SQLite, Postgres and Redis vector indexes share.

:class:`MatrixIndex` is their :class:`~fastaiagent.facts.vectors.StoredVectorIndex`
front: it checks every request once (the query vector against the dimension,
ids, namespaces, keyword queries, cached embeddings) and ranks in the namespace
matrices of :mod:`fastaiagent.facts.index.matrix`; a backend implements what
touches its storage:

- ``report_change``: what changed in a namespace since this process's copy
  (:class:`~fastaiagent.facts.index.matrix.Change`), which :meth:`MatrixIndex.current`
  applies to the copy;
- ``rank_namespaces`` / ``rank_spans``: the closest rows of the namespaces (of
  the spans of time) for a checked unit query, through :func:`ranked_hits`;
- ``score_keywords``: BM25 of the checked query terms (see
  :mod:`fastaiagent.facts.index.keywords`);
- ``read_chunks``, ``read_ids``, ``count_rows``, ``read_cache`` and
  ``write_cache``, with :class:`~fastaiagent.kb.protocols.NamespacedSearch`'s
  ``read_namespaces``, ``delete_ids`` and ``delete_namespace_rows``: rows by id
  or namespace, in bulk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from fastaiagent._validate import integer
from fastaiagent._validate import text as check_text
from fastaiagent.facts.entities import delete_book
from fastaiagent.facts.index.keywords import query_terms
from fastaiagent.facts.index.matrix import (
    Change,
    MatrixView,
    NamespaceCopies,
    NamespaceMatrix,
    unit_vector,
)
from fastaiagent.facts.vectors import RecordedSearch, Spans
from fastaiagent.kb.protocols import Chunk, NamespacedSearch, SearchHit, check_vector, id_list


def ranked_hits(
    found: Sequence[tuple[float, Any]],
    top_k: int,
    fetch: Callable[[list[Any]], Mapping[Any, Chunk]],
    *,
    ties_by_key: bool = False,
) -> list[SearchHit]:
    """The ``top_k`` best of ``(cosine, key)`` as hits, best first (equal scores in
    the order found, or by key), their chunks read by ``fetch(keys)`` in one go;
    keys it does not return (rows removed since the ranking) are left out."""
    if ties_by_key:
        best = sorted(found, key=lambda pair: (-pair[0], pair[1]))[:top_k]
    else:
        best = sorted(found, key=lambda pair: -pair[0])[:top_k]
    if not best:
        return []
    chunks = fetch([key for _, key in best])
    return [SearchHit(chunks[key], score) for score, key in best if key in chunks]


def vector_bytes(vector: Sequence[float]) -> bytes:
    """A vector as the float32 bytes the stores keep."""
    import numpy as np

    return np.asarray(vector, dtype=np.float32).tobytes()


def bytes_vector(blob: bytes) -> list[float]:
    """The inverse of :func:`vector_bytes`."""
    import numpy as np

    return np.frombuffer(blob, dtype=np.float32).tolist()


class MatrixIndex(NamespacedSearch, RecordedSearch):
    """The front of a vector index that ranks in its copies of namespaces
    (``copies``: in the process's shared budget, or at most ``cache_bytes`` of
    its own; see :class:`NamespaceCopies`): see the module doc."""

    def __init__(self, cache_bytes: int | None, *, keep_newest: bool = False) -> None:
        self.copies = NamespaceCopies(cache_bytes, keep_newest=keep_newest)

    # -- the copies of namespaces ---------------------------------------------

    def current(self, key: str, context: Any = None) -> MatrixView | None:
        """``key``'s rows as of now, from this process's copy brought up to date by
        :meth:`report_change` (``context``: what the backend's report reads with);
        None when the store holds no such namespace."""
        return self.copies.refresh(key, lambda held: self.report_change(context, key, held))

    def report_change(
        self, context: Any, key: str, held: NamespaceMatrix | None
    ) -> Change | None:
        """The backend's report: what changed in ``key`` since ``held`` (None: the
        whole namespace), or None when the store holds no such namespace."""
        raise NotImplementedError

    # -- search --------------------------------------------------------------

    def search_checked(self, query: list[float], top_k: int, keys: list[str] | None) -> list[SearchHit]:
        """Exact cosine, ranked in this process's copies of the namespaces."""
        return self.rank_namespaces(unit_vector(query), top_k, keys)

    def search_spans(
        self, vector: Sequence[float], top_k: int, keys: list[str], spans: Spans
    ) -> list[SearchHit]:
        """See :meth:`RecordedSearch.search_spans`: the rows of the spans, ranked in
        this process's copies of the namespaces."""
        query = self.query_vector(vector)
        return [] if query is None else self.rank_spans(unit_vector(query), top_k, keys, spans)

    def rank_namespaces(self, query: Any, top_k: int, keys: list[str] | None) -> list[SearchHit]:
        """The backend's search: :meth:`search_checked` with a unit ``query`` (float32)."""
        raise NotImplementedError

    def rank_spans(self, query: Any, top_k: int, keys: list[str], spans: Spans) -> list[SearchHit]:
        """The backend's ``search_spans`` with a unit ``query``."""
        raise NotImplementedError

    def keyword_search(self, query: str, top_k: int, *, namespace: str) -> list[tuple[str, float]]:
        """``(chunk id, BM25 score)`` of the ``top_k`` best keyword matches in
        ``namespace``, best first, scored with the namespace's own statistics (a
        user's ranking never depends on what other users said)."""
        terms = query_terms(query, top_k, namespace)
        return self.score_keywords(terms, top_k, namespace) if terms else []

    def score_keywords(self, terms: list[str], top_k: int, namespace: str) -> list[tuple[str, float]]:
        """The backend's ``keyword_search`` of the sorted distinct query ``terms``."""
        raise NotImplementedError

    # -- rows by id ------------------------------------------------------------

    def get(self, ids: Sequence[str]) -> list[Chunk]:
        """The chunks with these ids that exist, in the order asked (without vectors)."""
        wanted = id_list(ids, "get")
        found = self.read_chunks(wanted) if wanted else {}
        return [found[i] for i in wanted if i in found]

    def read_chunks(self, ids: list[str]) -> Mapping[str, Chunk]:
        """The backend's ``get``: the chunks of these (distinct) ids that exist, by id."""
        raise NotImplementedError

    def vector_pages(self, namespace: str, page: int = 500) -> Iterator[list[Chunk]]:
        """Every chunk of ``namespace`` with its (unit) vector, ``page`` at a time, in
        the order the store keeps them: what an export reads, in constant memory.
        A chunk added while the pages are read may be left out."""
        name, after = check_text("namespace", namespace), None
        while True:
            chunks, after = self.read_vector_page(name, after, page)
            if chunks:
                yield chunks
            if after is None:
                return

    def read_vector_page(self, namespace: str, after: Any, limit: int) -> tuple[list[Chunk], Any]:
        """The backend's :meth:`vector_pages`: up to ``limit`` chunks with vectors after
        the cursor ``after`` (None: from the start), and the next cursor (None: done)."""
        raise NotImplementedError

    def newest(self, namespace: str, limit: int = 50, offset: int = 0) -> list[Chunk]:
        """One page of ``namespace``'s chunks (without vectors), newest first by
        ``metadata["created_at"]`` (recall's messages: when each was said), those
        without a numeric time last; ``offset`` skips that many. What an operator's
        list of a user's messages reads, through the time index (never the whole
        namespace on SQLite and Postgres)."""
        name = check_text("namespace", namespace)
        size, skip = integer("limit", limit, minimum=0), integer("offset", offset, minimum=0)
        return self.read_newest(name, size, skip) if size else []

    def read_newest(self, namespace: str, limit: int, offset: int) -> list[Chunk]:
        """The backend's :meth:`newest` (``limit`` >= 1, ``offset`` >= 0, checked)."""
        raise NotImplementedError

    def namespace_names(self) -> list[str]:
        """Every namespace that holds a chunk, sorted."""
        return sorted(self.read_namespace_names())

    def read_namespace_names(self) -> Iterable[str]:
        """The backend's :meth:`namespace_names`."""
        raise NotImplementedError

    def namespace_counts(self) -> dict[str, int]:
        """Every namespace that holds a chunk, with how many (one read, not one per
        namespace): what a list of every user's recalled messages counts."""
        return {name: count for name, count in self.read_namespace_counts() if count > 0}

    def read_namespace_counts(self) -> Iterable[tuple[str, int]]:
        """The backend's :meth:`namespace_counts`."""
        raise NotImplementedError

    def ids(self, namespace: str) -> set[str]:
        """Every chunk id ``namespace`` holds."""
        return self.read_ids(check_text("namespace", namespace))

    def read_ids(self, namespace: str) -> set[str]:
        """The backend's ``ids``."""
        raise NotImplementedError

    def count(self, namespace: str | None = None) -> int:
        """How many chunks the index (or one namespace) holds."""
        return self.count_rows(None if namespace is None else check_text("namespace", namespace))

    def count_rows(self, namespace: str | None) -> int:
        """The backend's ``count``."""
        raise NotImplementedError

    def holds(self, namespace: str) -> bool:
        """Whether ``namespace`` holds a chunk (a backend whose count reads the
        namespace's whole index answers with one row instead)."""
        return self.count(namespace) > 0

    def write_analyzer(self, version: int) -> None:
        """The backend's record of the analyzer version its keyword postings were built
        with (:mod:`fastaiagent.facts.index.reindex`), replacing the one it holds."""
        raise NotImplementedError

    def delete_namespace(self, namespace: str) -> int:
        """Delete every chunk, keyword posting and cached embedding of ``namespace``
        (and this process's copy), and the entity book of the user it holds the
        messages of; returns how many chunks there were."""
        count = super().delete_namespace(namespace)
        self.copies.drop(namespace)
        delete_book(self, namespace)
        return count

    # -- the embedding cache ---------------------------------------------------

    def cached_embeddings(
        self, identity: str, namespace: str, keys: Sequence[str]
    ) -> dict[str, list[float]]:
        """Cached vectors of ``identity`` by text key in ``namespace`` (missing keys left out)."""
        check_text("identity", identity)
        check_text("namespace", namespace)
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        return {key: bytes_vector(blob) for key, blob in self.read_cache(identity, namespace, wanted)}

    def cache_embeddings(
        self, identity: str, namespace: str, vectors: Mapping[str, Sequence[float]]
    ) -> None:
        """Remember vectors of ``identity`` by text key in ``namespace`` (float32, one write)."""
        check_text("identity", identity)
        check_text("namespace", namespace)
        blobs = {
            check_text("text key", key): vector_bytes(check_vector(vector, None, f"cached vector {key!r}"))
            for key, vector in vectors.items()
        }
        if blobs:
            self.write_cache(identity, namespace, blobs)

    def forget_cached(self, namespace: str, keys: Sequence[str]) -> None:
        """Drop the cached vectors of these text keys in ``namespace``, of every
        identity (a deleted message's embedding goes with it)."""
        wanted = list(dict.fromkeys(check_text("text key", key) for key in keys))
        if wanted:
            self.delete_cache(check_text("namespace", namespace), wanted)

    def delete_cache(self, namespace: str, keys: list[str]) -> None:
        """The backend's :meth:`forget_cached` (distinct keys, at least one)."""
        raise NotImplementedError

    def read_cache(self, identity: str, namespace: str, keys: list[str]) -> Iterable[tuple[str, bytes]]:
        """The backend's cache read: ``(text key, float32 bytes)`` of the keys it holds."""
        raise NotImplementedError

    def write_cache(self, identity: str, namespace: str, blobs: Mapping[str, bytes]) -> None:
        """The backend's cache write, in one transaction or round trip."""
        raise NotImplementedError

    def close(self) -> None:
        """Drop this process's namespace copies (connections and clients belong to the
        fact store)."""
        self.copies.clear()


__all__ = ["MatrixIndex", "bytes_vector", "ranked_hits", "vector_bytes"]

