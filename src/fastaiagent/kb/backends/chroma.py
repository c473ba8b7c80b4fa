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
from fastaiagent.kb.protocols import Chunk, Dimension, NamespacedSearch, SearchHit, checked_batch

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
        self, collection_name: str | None = None, dimension: int | None = None, *,
        path: str | None = None, client: Any = None,
    ) -> None:
        if path is not None and client is not None:
            raise InvalidValueError("pass path= or client=, not both")
        if collection_name is not None:
            check_text("collection_name", collection_name)
        if path is not None:
            check_text("path", path)
        self._sizes = Dimension(dimension, "another collection")
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
        where = f"Chroma collection {collection_name!r}"
        self._dimension = self._sizes.agreed(None if stored is None else int(stored), where)

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
        with self._lock:
            batch = checked_batch(chunks, self._dimension)
            if batch is None:
                return
            self._collection.upsert(
                ids=[c.id for c in batch.chunks],
                embeddings=batch.vectors,
                documents=[c.text for c in batch.chunks],
                metadatas=[
                    {NS_FIELD: key, META_FIELD: json.dumps(c.metadata)}
                    for c, key in zip(batch.chunks, batch.keys, strict=True)
                ],
            )
            if self._dimension is None:
                self._remember_dimension(batch.dimension)
                self._dimension = batch.dimension

    def search_checked(self, query: list[float], top_k: int, keys: list[str] | None) -> list[SearchHit]:
        """One query with a ``where`` filter."""
        with self._lock:
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

    def read_namespaces(self, keys: list[str] | None) -> list[Chunk]:
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

    def delete_ids(self, ids: list[str]) -> int:
        with self._lock:
            existing = self._collection.get(ids=ids, include=[])["ids"]
            if existing:
                self._collection.delete(ids=existing)
            return len(existing)

    def delete_namespace_rows(self, namespace: str) -> int:
        with self._lock:
            existing = self._collection.get(where=self._where([namespace]), include=[])["ids"]
            if existing:
                self._collection.delete(ids=existing)
            return len(existing)

    def count(self, namespace: str | None = None) -> int:
        with self._lock:
            if namespace is None:
                return int(self._collection.count())
            return self._count_keys([check_text("namespace", namespace)])
