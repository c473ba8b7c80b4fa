"""The heap the vector caches free goes back to the operating system (fastaiagent._heap)."""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest

from fastaiagent import _heap
from fastaiagent.facts.index.matrix import MatrixCache


def _wait_for(count: int, seconds: float = 5.0) -> int:
    """The trims done once ``count`` are (or ``seconds`` have passed: a trim takes ms)."""
    deadline = time.monotonic() + seconds
    while _heap.trims() < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return _heap.trims()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="malloc_trim is glibc's")
def test_evicting_past_the_threshold_trims_the_heap_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_heap, "TRIM_AFTER_BYTES", 4 * 2**20)
    monkeypatch.setattr(_heap, "_freed", 0)
    before = _heap.trims()
    cache: MatrixCache[np.ndarray] = MatrixCache(2 * 2**20)
    for key in range(3):  # 1 MB each: the third put evicts 1 MB, below the threshold
        cache.put(key, np.ones(2**18, dtype=np.float32))
    assert _wait_for(before + 1, 0.3) == before
    for key in range(3, 8):  # 5 MB more evicted: past it
        cache.put(key, np.ones(2**18, dtype=np.float32))
    assert _wait_for(before + 1) == before + 1
    assert len(cache) == 2  # the cache itself is as before: the newest two


def test_without_malloc_trim_evicting_does_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_heap, "_trim", False)  # musl, macOS, Windows
    monkeypatch.setattr(_heap, "TRIM_AFTER_BYTES", 1)
    before = _heap.trims()
    cache: MatrixCache[np.ndarray] = MatrixCache(2**20)
    for key in range(4):
        cache.put(key, np.ones(2**17, dtype=np.float32))
    assert _wait_for(before + 1, 0.3) == before and len(cache) == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_during_a_trim_still_trims(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_heap, "_trimming", True)  # the parent's trim thread is running
    pid = os.fork()
    if pid == 0:  # the child: no trim thread, so the flag must be down
        os._exit(0 if _heap._trimming is False else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
