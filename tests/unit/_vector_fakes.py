"""Deterministic test embedders (tests only: the library never fakes meaning),
and the small recall block the recall tests build on them."""

from __future__ import annotations

import hashlib
import math
import re
import threading
from typing import Any

from fastaiagent.kb.bm25 import tokenize


class WordHashEmbedder:
    """Bag of stemmed words hashed into ``dimension`` buckets; counts its calls."""

    def __init__(self, dimension: int = 64) -> None:
        self.dimension = dimension
        self.calls: list[list[str]] = []
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            self.calls.append(list(texts))
        out = []
        for text in texts:
            vector = [0.0] * self.dimension
            for word in tokenize(text) or re.findall(r"\w+", text.lower()) or ["<empty>"]:
                bucket = int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimension
                vector[bucket] += 1.0
            norm = math.sqrt(sum(x * x for x in vector)) or 1.0
            out.append([x / norm for x in vector])
        return out

    @property
    def texts_embedded(self) -> int:
        return sum(len(c) for c in self.calls)


class BrokenEmbedder:
    """An embedder whose model cannot load."""

    dimension = 64

    def embed(self, texts: list[str]) -> list[list[float]]:
        raise RuntimeError("model weights not found")


def word_block(store: Any, name: str, steps: dict[str, Any] | None = None, **options: Any) -> Any:
    """A VectorBlock over ``store``'s vector index for namespace ``name``: word-hash
    vectors, the 3 best, every message kept, keywords indexed without the turn before;
    ``steps``: ranking weights changed for an experiment (``recall.weights.Ranking``)."""
    from fastaiagent.agent.memory_blocks.vector import VectorBlock

    settings: dict[str, Any] = {"top_k": 3, "min_content_chars": 1, "context_turns": 0, **options}
    block = VectorBlock(store.vector_store(), embedder=WordHashEmbedder(), namespace=name, **settings)
    block.ranking = block.ranking.with_(**(steps or {}))
    return block
