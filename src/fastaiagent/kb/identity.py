"""What names an embedder for embedding caches and stored vectors.

Vectors of two models must never meet: a store searched with another model's
query vectors, or a cache handing one model's vectors to another, ranks by
noise. So every vector and cached embedding carries its embedder's *identity*:
``<model>@<dimension>``, where the model part names the model itself (the
offline model: its folder name and a digest of its files; an API embedder:
its model name; any embedder: its own ``identity`` attribute).
"""

from __future__ import annotations

from fastaiagent.kb.model_files import PACKAGED_WEIGHTS_SHA256

PACKAGED_NAME = "all-MiniLM-L6-v2"
LOCAL_DIMENSION = 384


def embedder_identity(model: str, dimension: int) -> str:
    """``<model>@<dimension>``: vectors are cached and searched per identity."""
    return f"{model}@{dimension}"


PACKAGED_IDENTITY = embedder_identity(f"{PACKAGED_NAME}#{PACKAGED_WEIGHTS_SHA256[:16]}", LOCAL_DIMENSION)
"""The packaged offline model's identity (on ONNX Runtime and torch alike)."""
LEGACY_LOCAL_IDENTITY = "LocalEmbedder@384"
"""What vectors stored before identities named the model carry: every local
model was called this. Read as the packaged model, the one nearly all of them
came from (a store filled with another local model before then: re-embed it,
``Reembedding(index, embedder).run()``)."""


def same_embedder(stored: str | None, identity: str) -> bool:
    """Whether a vector or cached embedding recorded as made by ``stored`` is
    ``identity``'s (None, nothing recorded: taken as the current embedder's)."""
    return stored is None or stored == identity or (
        stored == LEGACY_LOCAL_IDENTITY and identity == PACKAGED_IDENTITY
    )


__all__ = [
    "LEGACY_LOCAL_IDENTITY",
    "PACKAGED_IDENTITY",
    "embedder_identity",
    "same_embedder",
]
