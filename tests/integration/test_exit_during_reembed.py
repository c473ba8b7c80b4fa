"""A normal exit while a background re-embed runs: the process exits 0 (native
embedder threads are never torn down under a running batch), nothing is lost,
and the next process resumes where this one stopped."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fastaiagent.kb.protocols import Chunk
from fastaiagent.learn import MemoryStore

SCRIPT = Path(__file__).with_name("_exit_during_reembed.py")
RUNS = 20

pytestmark = [pytest.mark.embedder, pytest.mark.subprocess, pytest.mark.slow]


def test_exiting_during_a_reembed_exits_cleanly_and_loses_nothing(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    db = tmp_path / "memory.db"
    store = MemoryStore(db)
    index = store.vector_store(384)
    text = "a message about the weather, the tea and the trip to the coast "
    index.add([
        Chunk(f"c{i}", f"{text * (1 + i % 4)} {i}", [0.01 * (1 + i % 7)] * 384,
              {"namespace": "user:a", "embedder": "AnotherModel@384"})
        for i in range(3000)
    ])  # fmt: skip
    store.close()

    def run(n: int) -> subprocess.CompletedProcess[str]:
        wait = (n % 5) / 10  # the exit lands at different points of a batch
        return subprocess.run(
            [sys.executable, str(SCRIPT), str(db), str(wait)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip

    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(run, range(RUNS)))
    assert [p.returncode for p in done] == [0] * RUNS, [p.stderr[-500:] for p in done if p.returncode]
    assert not [p for p in done if "terminate called" in p.stderr]
    store = MemoryStore(db)
    index = store.vector_store(384)
    chunks = list(index.chunks("user:a"))
    assert len(chunks) == 3000  # nothing lost
    redone = [c for c in chunks if c.metadata.get("embedder") != "AnotherModel@384"]
    assert len(redone) >= RUNS  # every process wrote at least its first batch; the next resumed
    store.close()
