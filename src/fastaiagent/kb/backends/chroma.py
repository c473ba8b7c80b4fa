"""ChromaVectorStore: a Chroma collection (in-memory, on disk with ``path=``, or a given client).

Namespaces are a metadata field and every query carries a ``where`` filter on
it, so Chroma filters before ranking. Chroma metadata only holds scalars, so
a chunk's metadata is kept as JSON beside the namespace field.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from fastaiagent._optional import require
from fastaiagent._validate import text as check_text
from fastaiagent.errors import InvalidValueError
from fastaiagent.kb.protocols import (
    Chunk,
    DimensionMismatchError,
    NamespacedSearch,
    SearchHit,
    check_chunk,
    check_dimension,
    check_vector,
    id_list,
    namespace_key,
    wanted_keys,
)

NS_FIELD = "_ns"
META_FIELD = "_meta"
_DIMENSION_FIELD = "fastaiagent_dimension"


class ChromaVectorStore(NamespacedSearch):
    """Vector store on Chroma (``pip install 'fastaiagent[chroma]'``).

    With neither ``path`` nor ``client`` the collection lives in memory under
    a unique name (Chroma shares in-memory state process-wide, so two stores
    must not meet by accident). ``dimension`` is fixed at the first add and
    remembered in the collection's metadata.
    """

    def __init__(
        self,
        collection_name: str | None = None,
        dimension: int | None = None,
        *,
        path: str | None = None,
        client: Any = None,
    ) -> None:
        if path is not None and client is not None:
            raise InvalidValueError("pass path= or client=, not both")
        if collection_name is not None:
            check_text("collection_name", collection_name)
        if path is not None:
            check_text("path", path)
        self._dimension = check_dimension(dimension)
        chromadb = require("chromadb", "chroma")
        if client is None:
            client = chromadb.PersistentClient(path=path) if path else chromadb.EphemeralClient()
        if collection_name is None:
            collection_name = "fastaiagent" if path else f"fastaiagent-{uuid.uuid4().hex}"
        self._client = client
        self.collection_name = collection_name
        self._lock = threading.RLock()
        self._collection = client.get_or_create_collection(
            collection_name, metadata={"hnsw:space": "cosine"}
        )
        stored = (self._collection.metadata or {}).get(_DIMENSION_FIELD)
        if stored is not None:
            if self._dimension is not None and self._dimension != stored:
                raise DimensionMismatchError(
                    f"Chroma collection {collection_name!r} has dimension {stored}, but "
                    f"dimension={self._dimension} was asked for"
                )
            self._dimension = int(stored)

    def __repr__(self) -> str:
        return f"ChromaVectorStore(collection_name={self.collection_name!r}, dimension={self._dimension})"

    @property
    def dimension(self) -> int | None:
        return self._dimension

    def _remember_dimension(self, dimension: int) -> None:
        if (self._collection.metadata or {}).get(_DIMENSION_FIELD) == dimension:
            return
        metadata = {k: v for k, v in (self._collection.metadata or {}).items() if k != "hnsw:space"}
        metadata[_DIMENSION_FIELD] = dimension
        self._collection.modify(metadata=metadata)

    @staticmethod
    def _where(keys: list[str] | None) -> dict[str, Any] | None:
        if keys is None:
            return None
        return {NS_FIELD: {"$in": keys}}

    @staticmethod
    def _to_chunk(chunk_id: str, text: str | None, meta: dict[str, Any] | None) -> Chunk:
        raw = (meta or {}).get(META_FIELD)
        return Chunk(id=chunk_id, text=text or "", metadata=json.loads(raw) if raw else {})

    def add(self, chunks: Sequence[Chunk]) -> None:
        items = list({c.id: c for c in chunks}.values()) if chunks else []
        if not items:
            return
        with self._lock:
            dimension = self._dimension
            vectors = []
            for chunk in items:
                vector = check_chunk(chunk, dimension)
                dimension = dimension or len(vector)
                vectors.append(vector)
            assert dimension is not None
            self._collection.upsert(
                ids=[c.id for c in items],
                embeddings=vectors,
                documents=[c.text for c in items],
                metadatas=[
                    {NS_FIELD: namespace_key(c.metadata), META_FIELD: json.dumps(c.metadata)}
                    for c in items
                ],
            )
            if self._dimension is None:
                self._remember_dimension(dimension)
                self._dimension = dimension

    def search_namespaces(
        self, vector: Sequence[float], top_k: int, keys: list[str] | None
    ) -> list[SearchHit]:
        """See :meth:`NamespacedSearch.search_namespaces`: one query with a ``where`` filter."""
        with self._lock:
            if self._dimension is None:
                return []
            query = check_vector(vector, self._dimension, "query vector")
            available = self._collection.count() if keys is None else self._count_keys(keys)
            if available == 0:
                return []
            result = self._collection.query(
                query_embeddings=[query],
                n_results=min(top_k, available),
                where=self._where(keys),
                include=["documents", "metadatas", "distances"],
            )
        ids = result["ids"][0]
        docs = (result.get("documents") or [[None] * len(ids)])[0]
        metas = (result.get("metadatas") or [[None] * len(ids)])[0]
        distances = (result.get("distances") or [[1.0] * len(ids)])[0]
        return [
            SearchHit(self._to_chunk(i, d, m), 1.0 - float(dist))
            for i, d, m, dist in zip(ids, docs, metas, distances, strict=False)
        ]

    def _count_keys(self, keys: list[str]) -> int:
        return len(self._collection.get(where=self._where(keys), include=[])["ids"])

    def get(self, ids: Sequence[str]) -> list[Chunk]:
        wanted = list(ids)
        if not wanted:
            return []
        with self._lock:
            result = self._collection.get(ids=wanted, include=["documents", "metadatas"])
        found = {
            i: self._to_chunk(i, d, m)
            for i, d, m in zip(
                result["ids"], result["documents"] or [], result["metadatas"] or [], strict=False
            )
        }
        return [found[i] for i in wanted if i in found]

    def chunks(self, namespace: str | None, *, include_untagged: bool = False) -> list[Chunk]:
        keys = wanted_keys(namespace, include_untagged)
        with self._lock:
            result = self._collection.get(
                where=self._where(keys), include=["documents", "metadatas"]
            )
        return [
            self._to_chunk(i, d, m)
            for i, d, m in zip(
                result["ids"], result["documents"] or [], result["metadatas"] or [], strict=False
            )
        ]

    def delete(self, ids: Sequence[str]) -> int:
        unique = id_list(ids, "delete")
        with self._lock:
            existing = self._collection.get(ids=unique, include=[])["ids"] if unique else []
            if existing:
                self._collection.delete(ids=existing)
            return len(existing)

    def delete_namespace(self, namespace: str) -> int:
        keys = wanted_keys(namespace, False)
        with self._lock:
            existing = self._collection.get(where=self._where(keys), include=[])["ids"]
            if existing:
                self._collection.delete(ids=existing)
            return len(existing)

    def count(self, namespace: str | None = None) -> int:
        with self._lock:
            if namespace is None:
                return int(self._collection.count())
            return self._count_keys(wanted_keys(namespace, False) or [])
