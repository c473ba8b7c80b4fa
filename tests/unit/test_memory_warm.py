"""Memory.warm(): what the first turn would load, loaded ahead."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastaiagent import Memory
from fastaiagent.errors import FastAIAgentError


class CountingEmbedder:
    dimension = 3

    def __init__(self, fail: bool = False) -> None:
        self.warmed = 0
        self.fail = fail

    def warm(self) -> None:
        self.warmed += 1
        if self.fail:
            raise RuntimeError("weights missing")

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0, 0.0] for _ in texts]


def test_warm_loads_the_embedder_when_recall_or_semantic_is_on(tmp_path: Path) -> None:
    for keywords in ({"recall": "auto"}, {"semantic": "auto"}):
        embedder = CountingEmbedder()
        Memory(f"sqlite:///{tmp_path / 'm.db'}", embedder=embedder, **keywords).warm()  # type: ignore[arg-type]
        assert embedder.warmed == 1, keywords
    plain = CountingEmbedder()
    Memory(f"sqlite:///{tmp_path / 'm.db'}", embedder=plain).warm()
    assert plain.warmed == 0  # nothing would embed: nothing to load


def test_an_embedder_that_cannot_load_is_raised_by_warm(tmp_path: Path) -> None:
    # warm() is where an application fails at start-up: nothing is only logged there.
    embedder = CountingEmbedder(fail=True)
    with pytest.raises(RuntimeError, match="weights missing"):
        Memory(f"sqlite:///{tmp_path / 'm.db'}", recall="auto", embedder=embedder).warm()


def test_a_store_that_cannot_be_read_is_raised(tmp_path: Path) -> None:
    broken = tmp_path / "not-a-db.db"
    broken.write_bytes(b"this is not a SQLite file" * 100)
    with pytest.raises(FastAIAgentError, match=r"not-a-db\.db"):
        Memory(f"sqlite:///{broken}").warm()
