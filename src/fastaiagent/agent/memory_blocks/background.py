"""A bounded background queue for memory work that may run after the reply.

Fact extraction and summaries cost an LLM call each; they need not delay the
answer. :class:`BackgroundQueue` runs submitted callables one at a time, in
submission order, on one daemon worker thread, with the submitter's context
(so the trace id and current span carry over). ``flush``/``aflush`` wait for
everything submitted so far. At normal interpreter exit every live queue is
drained before the rest of shutdown runs, so no learned fact is lost.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from fastaiagent._validate import integer, number, positive_number, text
from fastaiagent.agent.memory_blocks.base import MemoryBlock
from fastaiagent.errors import InvalidTypeError, UsageError
from fastaiagent.llm.message import Message

logger = logging.getLogger("fastaiagent.memory")

DEFAULT_MAX_PENDING = 1_000
DEFAULT_EXIT_TIMEOUT = 60.0
DEFAULT_IDLE_SECONDS = 5.0  # an idle worker exits; the next submit starts another

_live: weakref.WeakSet[BackgroundQueue] = weakref.WeakSet()
_exit_hook = {"registered": False}
_exit_lock = threading.Lock()


def _drain_all_at_exit() -> None:
    for queue in list(_live):
        try:
            queue.close(timeout=queue.exit_timeout)
        except Exception as exc:  # shutdown must go on whatever one queue does
            logger.warning("memory background queue failed to drain at exit: %s", exc)


def _register_exit_hook() -> None:
    # threading's exit hooks run before atexit handlers and before
    # concurrent.futures refuses new work, so jobs can still use thread pools
    # and connection pools that atexit handlers would already have closed.
    with _exit_lock:
        if _exit_hook["registered"]:
            return
        register = getattr(threading, "_register_atexit", None)
        try:
            if register is None:
                raise AttributeError
            register(_drain_all_at_exit)
        except (AttributeError, RuntimeError):
            atexit.register(_drain_all_at_exit)
        _exit_hook["registered"] = True


def _in_span(name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
    from fastaiagent import trace

    def job() -> Any:
        with trace.span(name):
            return fn()

    return job


class BackgroundQueue:
    """Run callables in order on one worker thread; wait for them with ``flush``.

    ``max_pending`` bounds the queue: ``submit`` blocks while that many jobs
    wait (back-pressure, never unbounded memory). A job that raises is logged
    and the next one runs. After :meth:`close`, ``submit`` runs jobs inline.
    """

    def __init__(
        self,
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
        name: str = "fastaiagent-memory",
        exit_timeout: float = DEFAULT_EXIT_TIMEOUT,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
    ) -> None:
        self.max_pending = integer("max_pending", max_pending, minimum=1)
        self.name = text("name", name)
        number("exit_timeout", exit_timeout, minimum=0)
        positive_number("idle_seconds", idle_seconds)
        self.exit_timeout = float(exit_timeout)
        self.idle_seconds = float(idle_seconds)
        self._jobs: deque[tuple[contextvars.Context, Callable[[], Any]]] = deque()
        self._unfinished = 0
        self._cond = threading.Condition()
        self._worker: threading.Thread | None = None
        self._closed = False
        self._pid = os.getpid()
        self.failures = 0

    def __repr__(self) -> str:
        return f"BackgroundQueue(name={self.name!r}, pending={self.pending})"

    @property
    def pending(self) -> int:
        """Jobs submitted and not finished yet (queued or running)."""
        with self._cond:
            return self._unfinished

    @property
    def closed(self) -> bool:
        return self._closed

    def _reset_after_fork(self) -> None:
        # A forked child has the parent's queue but not its worker thread.
        self._cond = threading.Condition()
        self._jobs = deque()
        self._unfinished = 0
        self._worker = None
        self._pid = os.getpid()

    def _ensure_worker(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._worker.start()
            _live.add(self)
            _register_exit_hook()

    def submit(self, fn: Callable[[], Any], *, span: str | None = None) -> None:
        """Queue ``fn()`` to run after the jobs already queued.

        The job runs in a copy of the caller's context, so the trace id of
        the run that submitted it carries over. With ``span``, the job runs
        inside a span of that name (a child of the caller's span even when
        that one has ended), so what it annotates is recorded.
        """
        if not callable(fn):
            raise InvalidTypeError("submit needs a callable taking no arguments")
        if span is not None:
            fn = _in_span(span, fn)
        context = contextvars.copy_context()
        if os.getpid() != self._pid:
            self._reset_after_fork()
        with self._cond:
            if self._closed:
                inline = True
            else:
                inline = False
                while len(self._jobs) >= self.max_pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    inline = True
                else:
                    self._jobs.append((context, fn))
                    self._unfinished += 1
                    self._ensure_worker()
                    self._cond.notify_all()
        if inline:
            self._call(context, fn)

    def _call(self, context: contextvars.Context, fn: Callable[[], Any]) -> None:
        try:
            context.run(fn)
        except Exception as exc:
            self.failures += 1
            logger.warning("memory background job failed: %s", exc, exc_info=True)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._jobs and not self._closed:
                    self._cond.wait_for(lambda: self._jobs or self._closed, self.idle_seconds)
                if not self._jobs:  # closed and drained, or idle: let the thread go
                    self._worker = None
                    _live.discard(self)
                    return
                context, fn = self._jobs.popleft()
                self._cond.notify_all()  # a slot is free for a blocked submit
            try:
                self._call(context, fn)
            finally:
                with self._cond:
                    self._unfinished -= 1
                    self._cond.notify_all()

    def _on_worker(self) -> bool:
        return self._worker is not None and threading.current_thread() is self._worker

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every job submitted so far has run; False if ``timeout`` passed first."""
        number("timeout", timeout, minimum=0, allow_none=True)
        if self._on_worker():
            raise UsageError("flush() called from a background job would wait for itself")
        if os.getpid() != self._pid:
            self._reset_after_fork()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._unfinished:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    async def aflush(self, timeout: float | None = None) -> bool:
        """Async :meth:`flush`: waits in a worker thread, never on the event loop."""
        return await asyncio.to_thread(self.flush, timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Run what is queued, then stop the worker. Later submits run inline.

        Returns False when ``timeout`` passed before the queue drained (the
        worker then finishes the remaining jobs on its own, as a daemon).
        """
        drained = self.flush(timeout) if not self._on_worker() else False
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        _live.discard(self)
        return drained


class AfterReplyBlock(MemoryBlock):
    """Runs a learning block's ``on_message`` on the background queue, after the reply.

    Rendering, saving and clearing go straight to the wrapped block; only the
    slow part (LLM extraction or summary) leaves the run's critical path.
    """

    def __init__(self, block: MemoryBlock, queue: Any) -> None:
        self.block = block
        self.name = block.name
        self._queue = queue

    @property
    def trace_name(self) -> str:
        return self.block.trace_name

    def on_message(self, message: Message) -> None:
        self._queue.submit(
            lambda: self.block.on_message(message), span=f"memory.write.{self.block.trace_name}"
        )

    def render_with_context(self, query: str, shared: Any) -> list[Message]:
        return self.block.render_with_context(query, shared)

    def dump_state(self) -> Any:
        return self.block.dump_state()

    def load_state(self, data: Any) -> None:
        self.block.load_state(data)

    def save(self, path: str | os.PathLike[str]) -> None:
        self.block.save(path)

    def load(self, path: str | os.PathLike[str]) -> None:
        self.block.load(path)

    def clear(self) -> None:
        self.block.clear()

    def isolated_copy(self) -> MemoryBlock:
        return self.block.isolated_copy()


__all__ = ["AfterReplyBlock", "BackgroundQueue"]
