"""Giving the heap that caches free back to the operating system (glibc only).

A long-running process reads the vector copies of the namespaces its users
search, grows them and evicts them in turn. glibc keeps much of what that frees
in its arenas instead of returning it, so with the live objects flat the heap
of a 250,000-turn run still crept ~0.2 MB per 1,000 turns, and ``malloc_trim``
gave it back (docs/production.md). So once the caches have evicted
:data:`TRIM_AFTER_BYTES` since the last trim, ``malloc_trim(0)`` runs on a
short-lived background thread (one at a time; the call holds no Python lock, so
turns go on meanwhile). Where the C library has no ``malloc_trim`` (musl,
macOS, Windows) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import time
from typing import Any

TRIM_AFTER_BYTES = 64 * 2**20
"""Bytes evicted from the caches between two trims (a trim costs a few ms of one
background thread, walking the heap's free blocks)."""

_lock = threading.Lock()
_freed = 0
_trimming = False
_done = 0
_seconds = 0.0  # spent in malloc_trim, all trims together
_trim: Any = None  # the C function once looked up; False where there is none


def freed(nbytes: int) -> None:
    """Note that a cache dropped ``nbytes``; past :data:`TRIM_AFTER_BYTES`, trim."""
    global _freed, _trimming
    with _lock:
        _freed += nbytes
        if _freed < TRIM_AFTER_BYTES or _trimming or _malloc_trim() is False:
            return
        _freed, _trimming = 0, True
    threading.Thread(target=_run_trim, name="fastaiagent-heap-trim", daemon=True).start()


def trims() -> int:
    """How many trims have run in this process (for tests and benches)."""
    return _done


def trim_seconds() -> float:
    """The time the trims took, all together (on their own thread)."""
    return _seconds


def _run_trim() -> None:
    global _trimming, _done, _seconds
    started = time.perf_counter()
    try:
        _malloc_trim()(0)
    finally:
        with _lock:
            _trimming = False
            _done += 1
            _seconds += time.perf_counter() - started


def _after_fork() -> None:
    """A forked child has no trim thread, whatever the parent was doing."""
    global _lock, _freed, _trimming
    _lock, _freed, _trimming = threading.Lock(), 0, False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _malloc_trim() -> Any:
    """The C library's ``malloc_trim``, or False where it has none."""
    global _trim
    if _trim is None:
        name = ctypes.util.find_library("c")
        try:
            function = ctypes.CDLL(name).malloc_trim if name else None
        except (OSError, AttributeError):
            function = None
        if function is not None:
            function.argtypes, function.restype = [ctypes.c_size_t], ctypes.c_int
        _trim = function if function is not None else False
    return _trim


__all__ = ["TRIM_AFTER_BYTES", "freed", "trim_seconds", "trims"]
