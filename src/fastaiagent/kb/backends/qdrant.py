"""QdrantVectorStore: Qdrant in local mode (``path=`` or ``":memory:"``) or a server ``url=``.

Namespaces are a keyword payload field with a payload index on servers, and
every search carries the namespace filter, so Qdrant filters before ranking
(no client-side widening over the whole collection). Qdrant point ids must be
UUIDs or integers: any other chunk id is mapped to a stable uuid5 and the
original id is kept in the payload.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from typing import Any

from fastaiagent._optional import require
from fastaiagent._validate import text as check_text
from fastaiagent.errors import InvalidValueError
from fastaiagent.kb.protocols import (
    UNTAGGED,
    Chunk,
    Dimension,
    NamespacedSearch,
    SearchHit,
    checked_batch,
)

_ID_NAMESPACE = uuid.UUID("6f1d0c2e-4b7a-5e0f-9a51-0c3f2b8e7d14")
NS_FIELD = "ns"
_SCROLL_PAGE = 1024


def point_id(chunk_id: str) -> str:
    """The Qdrant point id of a chunk id: itself when it is a UUID, else a uuid5."""
    try:
        return str(uuid.UUID(chunk_id))
    except ValueError:
        return str(uuid.uuid5(_ID_NAMESPACE, chunk_id))


class QdrantVectorStore(NamespacedSearch):
    """Vector store on Qdrant (``pip install 'fastaiagent[qdrant]'``).

    Exactly one of ``path`` (a local-mode directory, or ``":memory:"``),
    ``url`` (a server) or ``client`` (a ready ``QdrantClient``); with none,
    an in-memory local instance. ``dimension=None`` reads it from an existing
    collection, or takes the size of the first vector added.
    """

    def __init__(
        self,
        collection_name: str = "fastaiagent",
        dimension: int | None = None,
        *,
        path: str | None = None,
        url: str | None = None,
        api_key: str | None = None,
        client: Any = None,
    ) -> None:
        if sum(x is not None for x in (path, url, client)) > 1:
            raise InvalidValueError("pass only one of path=, url= or client=")
        check_text("collection_name", collection_name)
        for option, value in (("path", path), ("url", url), ("api_key", api_key)):
            if value is not None:
                check_text(option, value)
        self._sizes = Dimension(dimension, "another collection")
        self._dimension = self._sizes.asked
        qdrant = require("qdrant_client", "qdrant")
        self._models = require("qdrant_client.models", "qdrant")
        if client is None:
            if url is not None:
                client = qdrant.QdrantClient(url=url, api_key=api_key)
            elif path is None or path == ":memory:":
                client = qdrant.QdrantClient(location=":memory:")
            else:
                client = qdrant.QdrantClient(path=path)
        self._client = client
        self._server = url is not None
        self.collection_name = collection_name
        self._ready = False
        self._lock = threading.RLock()
        with self._lock:
            if self._client.collection_exists(collection_name):
                self._attach_existing()

    def __repr__(self) -> str:
        return f"QdrantVectorStore(collection_name={self.collection_name!r}, dimension={self._dimension})"

    @property
    def dimension(self) -> int | None:
        return self._dimension

    def _attach_existing(self) -> None:
        info = self._client.get_collection(self.collection_name)
        vectors = info.config.params.vectors
        size = vectors.size if hasattr(vectors, "size") else None
        self._dimension = self._sizes.agreed(size, f"Qdrant collection {self.collection_name!r}")
        self._index_namespaces()  # a collection made elsewhere may lack it; creating is idempotent
        self._ready = True

    def _index_namespaces(self) -> None:
        """The payload index that lets a server filter namespaces without a scan."""
        if self._server:  # local mode has no payload indexes (and warns about them)
            self._client.create_payload_index(
                self.collection_name, NS_FIELD, field_schema=self._models.PayloadSchemaType.KEYWORD
            )

    def _ensure_collection(self, dimension: int) -> None:
        if self._ready:
            return
        models = self._models
        self._client.create_collection(
            self.collection_name,
            vectors_config=models.VectorParams(size=dimension, distance=models.Distance.COSINE),
        )
        self._index_namespaces()
        self._dimension = dimension
        self._ready = True

    def _filter(self, keys: list[str] | None) -> Any:
        if keys is None:
            return None
        models = self._models
        return models.Filter(
            must=[models.FieldCondition(key=NS_FIELD, match=models.MatchAny(any=keys))]
        )

    @staticmethod
    def _to_chunk(payload: dict[str, Any], vector: Any = None) -> Chunk:
        return Chunk(
            id=payload["chunk_id"],
            text=payload.get("text", ""),
            vector=list(vector) if vector is not None else None,
            metadata=dict(payload.get("metadata") or {}),
        )

    def add(self, chunks: Sequence[Chunk]) -> None:
        models = self._models
        with self._lock:
            batch = checked_batch(chunks, self._dimension)
            if batch is None:
                return
            points = [
                models.PointStruct(
                    id=point_id(chunk.id),
                    vector=vector,
                    payload={"chunk_id": chunk.id, "text": chunk.text,
                             "metadata": dict(chunk.metadata), NS_FIELD: key},
                )
                for chunk, vector, key in zip(batch.chunks, batch.vectors, batch.keys, strict=True)
            ]
            self._ensure_collection(batch.dimension)
            self._client.upsert(self.collection_name, points=points, wait=True)

    def search_checked(self, query: list[float], top_k: int, keys: list[str] | None) -> list[SearchHit]:
        """One query with a payload filter."""
        with self._lock:
            if not self._ready:
                return []
            result = self._client.query_points(
                self.collection_name,
                query=query,
                limit=top_k,
                query_filter=self._filter(keys),
                with_payload=True,
            )
        return [SearchHit(self._to_chunk(p.payload or {}), float(p.score)) for p in result.points]

    def get(self, ids: Sequence[str]) -> list[Chunk]:
        wanted = list(ids)
        with self._lock:
            if not self._ready or not wanted:
                return []
            points = self._client.retrieve(
                self.collection_name, ids=[point_id(i) for i in wanted], with_payload=True
            )
        found = {p.payload["chunk_id"]: self._to_chunk(p.payload) for p in points if p.payload}
        return [found[i] for i in wanted if i in found]

    def read_namespaces(self, keys: list[str] | None) -> list[Chunk]:
        out: list[Chunk] = []
        with self._lock:
            if not self._ready:
                return out
            offset = None
            while True:
                points, offset = self._client.scroll(
                    self.collection_name,
                    scroll_filter=self._filter(keys),
                    limit=_SCROLL_PAGE,
                    offset=offset,
                    with_payload=True,
                )
                out.extend(self._to_chunk(p.payload) for p in points if p.payload)
                if offset is None:
                    return out

    def delete_ids(self, ids: list[str]) -> int:
        with self._lock:
            existing = self.get(ids)
            if existing:
                self._client.delete(
                    self.collection_name,
                    points_selector=self._models.PointIdsList(
                        points=[point_id(c.id) for c in existing]
                    ),
                    wait=True,
                )
            return len(existing)

    def delete_namespace_rows(self, namespace: str) -> int:
        with self._lock:
            count = self.count(namespace)
            if count:
                self._client.delete(
                    self.collection_name,
                    points_selector=self._models.FilterSelector(filter=self._filter([namespace])),
                    wait=True,
                )
            return count

    def count(self, namespace: str | None = None) -> int:
        keys = None if namespace is None else [check_text("namespace", namespace)]
        with self._lock:
            if not self._ready:
                return 0
            return int(
                self._client.count(
                    self.collection_name, count_filter=self._filter(keys), exact=True
                ).count
            )

    def close(self) -> None:
        """Close the client (releases a local-mode directory lock)."""
        with self._lock:
            self._client.close()


__all__ = ["UNTAGGED", "QdrantVectorStore", "point_id"]
