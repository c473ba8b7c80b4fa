"""Run a call on a helper thread beside the caller's own work.

Recall asks a store-backed index two things per query: its keyword side mostly
waits on the database (SQLite, Postgres or Redis, the GIL free meanwhile) while
the caller scores the query vector (numpy, the GIL free too). Done side by side
they take about as long as the slower one. A few helper threads per process;
when all are busy the call runs in the caller's thread, so many concurrent
callers never queue behind each other. A forked child starts its own helpers.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

HELPERS = 2
"""Helper threads per process."""

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_free = threading.Semaphore(HELPERS)


def _pool_now() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(HELPERS, thread_name_prefix="fastaiagent-beside")
        return _pool


def _inline(fn: Callable[..., T], args: tuple[Any, ...]) -> Future[T]:
    done: Future[T] = Future()
    try:
        done.set_result(fn(*args))
    except BaseException as exc:  # handed to the caller by result()
        done.set_exception(exc)
    return done


def beside(fn: Callable[..., T], *args: Any) -> Future[T]:
    """Start ``fn(*args)`` on a helper thread (with the caller's context vars) and
    return its future; run it now, in this thread, when every helper is busy."""
    if not _free.acquire(blocking=False):
        return _inline(fn, args)
    context = contextvars.copy_context()

    def run() -> T:
        try:
            return context.run(fn, *args)
        finally:
            _free.release()

    try:
        return _pool_now().submit(run)
    except RuntimeError:  # the interpreter is shutting down: no new threads
        _free.release()
        return _inline(fn, args)


def _after_fork() -> None:
    global _lock, _pool, _free
    _lock, _pool, _free = threading.Lock(), None, threading.Semaphore(HELPERS)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


__all__ = ["HELPERS", "beside"]
