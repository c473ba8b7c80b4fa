"""Each text embedded once: an embedder that asks a store-backed index's cache first.

A :class:`~fastaiagent.facts.vectors.StoredVectorIndex` keeps vectors by
embedder identity and text hash, per namespace. :class:`CachedEmbedder`
wraps an embedder for one namespace: cached texts are read back, the rest
are embedded in one batch and written to the cache, so a restarted process,
a second worker or a re-index never pays for the same text twice. The
identity is ``<model>@<dimension>``: another model (or size) misses the
cache instead of reading vectors it did not make.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastaiagent.errors import InvalidValueError
from fastaiagent.facts.vectors import embedder_identity, text_key

EMBEDDER_KEY = "embedder"
"""Chunk metadata key naming the identity of the embedder that made its vector."""


def identity_of(embedder: Any) -> str:
    """The cache identity of ``embedder``: its ``identity`` attribute when it has one,
    else ``<model>@<dimension>`` (``model`` or ``model_name``, else the class name)."""
    explicit = getattr(embedder, "identity", None)
    if isinstance(explicit, str) and explicit:
        return explicit
    model = getattr(embedder, "model", None) or getattr(embedder, "model_name", None)
    if not isinstance(model, str) or not model:
        model = type(embedder).__name__
    return embedder_identity(model, int(getattr(embedder, "dimension", 0) or 0))


def holds_cache(index: Any) -> bool:
    """True when ``index`` offers the embedding cache of a StoredVectorIndex."""
    return callable(getattr(index, "cached_embeddings", None)) and callable(
        getattr(index, "cache_embeddings", None)
    )


class CachedEmbedder:
    """``embedder`` behind ``index``'s embedding cache for ``namespace`` (an Embedder itself)."""

    def __init__(self, embedder: Any, index: Any, namespace: str) -> None:
        self.inner = embedder
        self.index = index
        self.namespace = namespace
        self.identity = identity_of(embedder)
        self.embedded = 0  # texts this wrapper sent to the embedder (the cache missed)

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, namespace={self.namespace!r})"

    @property
    def dimension(self) -> int:
        """The wrapped embedder's dimension."""
        return int(self.inner.dimension)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for ``texts``: cached ones read back, the others embedded in one batch
        (a text repeated in the batch is embedded once) and cached."""
        items = list(texts)
        if not items:
            return []
        keys = [text_key(t) for t in items]
        unique = list(dict.fromkeys(keys))
        found = self.index.cached_embeddings(self.identity, self.namespace, unique)
        missing = {k: t for k, t in zip(keys, items, strict=True) if k not in found}
        if missing:
            vectors = self.inner.embed(list(missing.values()))
            if len(vectors) != len(missing):
                raise InvalidValueError(
                    f"embedder returned {len(vectors)} vectors for {len(missing)} texts: "
                    "an Embedder must return one vector per text"
                )
            made = {k: [float(x) for x in v] for k, v in zip(missing, vectors, strict=True)}
            self.index.cache_embeddings(self.identity, self.namespace, made)
            self.embedded += len(made)
            found = {**found, **made}
        return [list(found[k]) for k in keys]


def cached(embedder: Any, index: Any, namespace: str) -> Any:
    """``embedder`` behind ``index``'s cache for ``namespace`` when the index has one,
    else ``embedder`` itself (an in-process store: nothing would outlive the process)."""
    if not holds_cache(index):
        return embedder
    if isinstance(embedder, CachedEmbedder):
        embedder = embedder.inner
    return CachedEmbedder(embedder, index, namespace)


__all__ = ["EMBEDDER_KEY", "CachedEmbedder", "cached", "holds_cache", "identity_of"]
