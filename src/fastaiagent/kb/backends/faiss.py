"""FaissVectorStore: an in-process FAISS index, one sub-index per namespace.

Each namespace (and the untagged chunks) gets its own FAISS index, so a
search reads only the namespaces it asks for: a quiet user's recall costs
what that user stored, however busy the rest of the store is.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from fastaiagent._optional import require
from fastaiagent._validate import integer, one_of
from fastaiagent.kb.protocols import (
    Chunk,
    NamespacedSearch,
    SearchHit,
    check_dimension,
    checked_batch,
)

INDEX_TYPES = ("flat", "hnsw")
THREADS_ENV = "FASTAIAGENT_FAISS_THREADS"
_threads_set = False


def _limit_threads(faiss: Any) -> None:
    """Run FAISS single-threaded unless ``$FASTAIAGENT_FAISS_THREADS`` says otherwise.

    Recall searches one query vector at a time, where OpenMP's thread
    start-up and spinning cost far more than they save: on a busy 2-core
    machine a 10k-vector flat search took 99 ms with 2 threads, 1.5 ms with 1.
    """
    global _threads_set
    if not _threads_set:
        faiss.omp_set_num_threads(int(os.environ.get(THREADS_ENV, "1")))
        _threads_set = True


class _SubIndex:
    """One namespace: a FAISS index plus the chunks it holds by internal id."""

    def __init__(self, faiss: Any, dimension: int, index_type: str, hnsw_m: int) -> None:
        self.faiss = faiss
        self.dimension = dimension
        self.index_type = index_type
        self.hnsw_m = hnsw_m
        self.chunks: dict[int, Chunk] = {}
        self.tombstones: set[int] = set()  # HNSW cannot remove vectors; we skip them
        self.index = self._new_index()

    def _new_index(self) -> Any:
        faiss = self.faiss
        if self.index_type == "flat":
            return faiss.IndexIDMap2(faiss.IndexFlatIP(self.dimension))
        return faiss.IndexIDMap(
            faiss.IndexHNSWFlat(self.dimension, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        )

    def add(self, int_ids: list[int], vectors: Any, chunks: list[Chunk]) -> None:
        import numpy as np

        self.index.add_with_ids(vectors, np.asarray(int_ids, dtype="int64"))
        self.chunks.update(zip(int_ids, chunks, strict=False))

    def remove(self, int_ids: list[int]) -> None:
        import numpy as np

        for int_id in int_ids:
            self.chunks.pop(int_id, None)
        if self.index_type == "flat":
            self.index.remove_ids(np.asarray(int_ids, dtype="int64"))
            return
        self.tombstones.update(int_ids)
        if len(self.tombstones) > max(64, len(self.chunks)):
            self._rebuild()

    def _rebuild(self) -> None:
        import numpy as np

        live = [i for i in self._all_ids() if i not in self.tombstones]
        vectors = np.vstack([self.index.reconstruct(i) for i in live]) if live else None
        self.index = self._new_index()
        self.tombstones.clear()
        if vectors is not None:
            self.index.add_with_ids(vectors, np.asarray(live, dtype="int64"))

    def _all_ids(self) -> list[int]:
        import faiss as _faiss

        return [int(i) for i in _faiss.vector_to_array(self.index.id_map)]

    def search(self, query: Any, top_k: int) -> list[tuple[int, float]]:
        live = len(self.chunks)
        if live == 0 or top_k == 0:
            return []
        fetch = min(self.index.ntotal, top_k + len(self.tombstones))
        scores, ids = self.index.search(query, fetch)
        out = []
        # Python numbers first: iterating numpy scalars costs ~1 us each.
        for score, int_id in zip(scores[0].tolist(), ids[0].tolist(), strict=False):
            if int_id < 0 or int_id in self.tombstones or int_id not in self.chunks:
                continue
            out.append((int_id, score))
            if len(out) == top_k:
                break
        return out


class FaissVectorStore(NamespacedSearch):
    """In-process vector store on FAISS (``pip install 'fastaiagent[faiss]'``).

    ``index_type="flat"`` is exact search; ``"hnsw"`` is approximate and
    faster on large namespaces. Vectors are L2-normalised, so scores are
    cosine similarities. Thread-safe: one lock guards every operation.
    ``dimension=None`` takes the size of the first vector added.
    """

    def __init__(
        self, dimension: int | None = None, index_type: str = "flat", *, hnsw_m: int = 32
    ) -> None:
        # Checked before the import, so a typo is reported even without faiss.
        self._dimension = check_dimension(dimension)
        one_of("index_type", index_type, INDEX_TYPES)
        integer("hnsw_m", hnsw_m, minimum=2)
        self._faiss = require("faiss", "faiss")
        _limit_threads(self._faiss)
        self.index_type = index_type
        self._hnsw_m = hnsw_m
        self._subs: dict[str, _SubIndex] = {}
        self._where: dict[str, tuple[str, int]] = {}  # chunk id -> (namespace key, int id)
        self._next_id = 0
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return (
            f"FaissVectorStore(dimension={self._dimension}, index_type={self.index_type!r}, "
            f"count={len(self._where)})"
        )

    @property
    def dimension(self) -> int | None:
        return self._dimension

    def _matrix(self, vectors: list[list[float]]) -> Any:
        import numpy as np

        matrix = np.asarray(vectors, dtype="float32")
        self._faiss.normalize_L2(matrix)
        return matrix

    def add(self, chunks: Sequence[Chunk]) -> None:
        """Insert or replace chunks by id (the last write wins for a repeated id)."""
        with self._lock:
            batch = checked_batch(chunks, self._dimension)
            if batch is None:
                return
            dimension = self._dimension = batch.dimension
            items, vectors = batch.chunks, batch.vectors
            self._remove_ids([chunk.id for chunk in items])
            grouped: dict[str, list[int]] = {}
            for n, key in enumerate(batch.keys):
                grouped.setdefault(key, []).append(n)
            for key, positions in grouped.items():
                sub = self._subs.get(key)
                if sub is None:
                    sub = self._subs[key] = _SubIndex(
                        self._faiss, dimension, self.index_type, self._hnsw_m
                    )
                int_ids = list(range(self._next_id, self._next_id + len(positions)))
                self._next_id += len(positions)
                stored = [
                    replace(items[n], vector=None, metadata=dict(items[n].metadata))
                    for n in positions
                ]
                sub.add(int_ids, self._matrix([vectors[n] for n in positions]), stored)
                for int_id, chunk in zip(int_ids, stored, strict=False):
                    self._where[chunk.id] = (key, int_id)

    def search_checked(self, query: list[float], top_k: int, keys: list[str] | None) -> list[SearchHit]:
        """Each key's own sub-index."""
        unit = self._matrix([query])
        with self._lock:
            subs = [
                self._subs[k]
                for k in (keys if keys is not None else list(self._subs))
                if k in self._subs
            ]
            found: list[SearchHit] = []
            for sub in subs:
                for int_id, score in sub.search(unit, top_k):
                    found.append(SearchHit(_copy(sub.chunks[int_id]), score))
        found.sort(key=lambda hit: hit.score, reverse=True)
        return found[:top_k]

    def get(self, ids: Sequence[str]) -> list[Chunk]:
        with self._lock:
            out = []
            for chunk_id in ids:
                where = self._where.get(chunk_id)
                if where is not None:
                    out.append(_copy(self._subs[where[0]].chunks[where[1]]))
            return out

    def read_namespaces(self, keys: list[str] | None) -> list[Chunk]:
        with self._lock:
            subs = [
                self._subs[k]
                for k in (keys if keys is not None else list(self._subs))
                if k in self._subs
            ]
            return [_copy(chunk) for sub in subs for chunk in sub.chunks.values()]

    def _remove_ids(self, ids: list[str]) -> int:
        by_key: dict[str, list[int]] = {}
        for chunk_id in ids:
            where = self._where.pop(chunk_id, None)
            if where is not None:
                by_key.setdefault(where[0], []).append(where[1])
        for key, int_ids in by_key.items():
            self._subs[key].remove(int_ids)
        return sum(len(v) for v in by_key.values())

    def delete_ids(self, ids: list[str]) -> int:
        with self._lock:
            return self._remove_ids(ids)

    def delete_namespace_rows(self, namespace: str) -> int:
        with self._lock:
            sub = self._subs.pop(namespace, None)
            if sub is None:
                return 0
            for chunk in sub.chunks.values():
                self._where.pop(chunk.id, None)
            return len(sub.chunks)

    def count(self, namespace: str | None = None) -> int:
        with self._lock:
            if namespace is None:
                return len(self._where)
            sub = self._subs.get(namespace)
            return len(sub.chunks) if sub is not None else 0


def _copy(chunk: Chunk) -> Chunk:
    # Built directly: dataclasses.replace reads the fields on every call (a search copies each hit).
    return Chunk(chunk.id, chunk.text, chunk.vector, dict(chunk.metadata))
