"""A bounded background queue for memory work that may run after the reply.

Fact extraction and summaries cost an LLM call each; they need not delay the
answer. :class:`BackgroundQueue` runs submitted callables on a small pool of
daemon worker threads, one *lane* (one user) at a time per worker: each user's
jobs run in submission order, several users' at once. Jobs run with the
submitter's context (so the trace id and current span carry over). ``flush``/``aflush`` wait for
everything submitted so far. At normal interpreter exit every live queue is
drained before the rest of shutdown runs, so no learned fact is lost.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from fastaiagent._exit import at_exit
from fastaiagent._validate import integer, number, positive_number, text
from fastaiagent.agent.memory_blocks.base import MemoryBlock
from fastaiagent.errors import InvalidTypeError, UsageError
from fastaiagent.llm.message import Message

logger = logging.getLogger("fastaiagent.memory")

DEFAULT_MAX_PENDING = 1_000
DEFAULT_EXIT_TIMEOUT = 60.0
DEFAULT_IDLE_SECONDS = 5.0  # an idle worker exits; the next submit starts another
DEFAULT_WORKERS = 4  # users whose learning runs at once (each user's jobs stay in order)

# The user of the run in progress (set by Memory for each run). Jobs submitted
# during a run queue on that user's lane; save()/load() inside a run use it too.
current_user: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "fastaiagent_memory_user", default=None
)

_live: weakref.WeakSet[BackgroundQueue] = weakref.WeakSet()


def _drain_all_at_exit() -> None:
    for queue in list(_live):
        try:
            queue.close(timeout=queue.exit_timeout)
        except Exception as exc:  # shutdown must go on whatever one queue does
            logger.warning("memory background queue failed to drain at exit: %s", exc)


def _in_span(name: str, fn: Callable[[], Any]) -> Callable[[], Any]:
    from fastaiagent import trace

    def job() -> Any:
        with trace.span(name):
            return fn()

    return job


class BackgroundQueue:
    """Run callables on a few worker threads, in order per *lane*; wait with ``flush``.

    A lane is one user's work (by default the user of the run that submits,
    see :data:`current_user`): a lane's jobs run one at a time in submission
    order, and up to ``workers`` lanes run at once, so one user's slow
    extraction never holds up another's. ``max_pending`` bounds the jobs
    waiting: ``submit`` blocks while that many wait (back-pressure, never
    unbounded memory). A job that raises is logged and the next one runs.
    After :meth:`close`, ``submit`` runs jobs inline.
    """

    def __init__(
        self,
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
        name: str = "fastaiagent-memory",
        exit_timeout: float = DEFAULT_EXIT_TIMEOUT,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        workers: int = DEFAULT_WORKERS,
    ) -> None:
        self.max_pending = integer("max_pending", max_pending, minimum=1)
        self.workers = integer("workers", workers, minimum=1)
        self.name = text("name", name)
        number("exit_timeout", exit_timeout, minimum=0)
        positive_number("idle_seconds", idle_seconds)
        self.exit_timeout = float(exit_timeout)
        self.idle_seconds = float(idle_seconds)
        self._closed = False
        self.failures = 0
        self._reset_after_fork()

    def __repr__(self) -> str:
        return f"BackgroundQueue(name={self.name!r}, pending={self.pending})"

    @property
    def pending(self) -> int:
        """Jobs submitted and not finished yet (queued or running)."""
        with self._cond:
            return self._unfinished

    def pending_in(self, lane: str | None) -> int:
        """Jobs of one lane submitted and not finished yet."""
        with self._cond:
            return self._lane_unfinished.get(lane, 0)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def worker_count(self) -> int:
        """Worker threads alive now (idle ones exit after ``idle_seconds``)."""
        with self._cond:
            return len(self._threads)

    def _reset_after_fork(self) -> None:
        # Also the initial state. A forked child has the parent's queue but not
        # its worker threads: it starts empty and opens its own.
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # flush and back-pressure waiters
        self._work = threading.Condition(lock)  # idle workers, woken one per new ready lane
        self._lanes: dict[str | None, deque[tuple[contextvars.Context, Callable[[], Any]]]] = {}
        self._ready: deque[str | None] = deque()  # lanes with a job waiting and none running
        self._waiting = 0  # jobs queued, not yet running
        self._unfinished = 0
        self._lane_unfinished: dict[str | None, int] = {}
        self._threads: set[threading.Thread] = set()
        self._idle = 0
        self._pid = os.getpid()

    def _ensure_worker(self) -> None:
        # Called under the lock: start a worker when ready lanes outnumber idle ones.
        if len(self._threads) < self.workers and len(self._ready) > self._idle:
            worker = threading.Thread(
                target=self._run, name=f"{self.name}-{len(self._threads)}", daemon=True
            )
            self._threads.add(worker)
            worker.start()
            _live.add(self)
            at_exit(_drain_all_at_exit)

    def submit(
        self, fn: Callable[[], Any], *, span: str | None = None, lane: str | None = None
    ) -> None:
        """Queue ``fn()`` to run after the jobs already queued in its lane.

        ``lane`` defaults to the user of the run in progress (``None`` outside
        a run: one shared lane). The job runs in a copy of the caller's
        context, so the trace id of the run that submitted it carries over.
        With ``span``, the job runs inside a span of that name (a child of the
        caller's span even when that one has ended), so what it annotates is
        recorded.
        """
        if not callable(fn):
            raise InvalidTypeError("submit needs a callable taking no arguments")
        if span is not None:
            fn = _in_span(span, fn)
        context = contextvars.copy_context()
        if lane is None:
            lane = current_user.get()
        if os.getpid() != self._pid:
            self._reset_after_fork()
        with self._cond:
            while self._waiting >= self.max_pending and not self._closed:
                self._cond.wait()
            inline = self._closed
            if not inline:
                self._enqueue(lane, context, fn)
        if inline:
            self._call(context, fn)

    def _enqueue(self, lane: str | None, context: contextvars.Context, fn: Callable[[], Any]) -> None:
        jobs = self._lanes.setdefault(lane, deque())
        jobs.append((context, fn))
        running = self._lane_unfinished.get(lane, 0) > len(jobs) - 1
        if len(jobs) == 1 and not running:
            self._ready.append(lane)
        self._waiting += 1
        self._unfinished += 1
        self._lane_unfinished[lane] = self._lane_unfinished.get(lane, 0) + 1
        self._ensure_worker()
        self._work.notify()

    def _call(self, context: contextvars.Context, fn: Callable[[], Any]) -> None:
        try:
            context.run(fn)
        except Exception as exc:
            self.failures += 1
            logger.warning("memory background job failed: %s", exc, exc_info=True)

    def _next_lane(self) -> str | bool | None:
        """Under the lock: a ready lane, or False when this worker should exit."""
        deadline = time.monotonic() + self.idle_seconds
        while not self._ready and not self._closed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._idle += 1
            try:
                self._work.wait(remaining)
            finally:
                self._idle -= 1
        if not self._ready:  # closed and drained, or idle: let the thread go
            self._threads.discard(threading.current_thread())
            if not self._threads:
                _live.discard(self)
            return False
        return self._ready.popleft()

    def _run(self) -> None:
        while True:
            with self._cond:
                lane = self._next_lane()
                if lane is False:
                    return
                assert lane is None or isinstance(lane, str)
                context, fn = self._lanes[lane].popleft()
                self._waiting -= 1
                self._cond.notify_all()  # a slot is free for a blocked submit
            try:
                self._call(context, fn)
            finally:
                with self._cond:
                    self._finished(lane)

    def _finished(self, lane: str | None) -> None:
        self._unfinished -= 1
        left = self._lane_unfinished[lane] - 1
        if left:
            self._lane_unfinished[lane] = left
        else:
            del self._lane_unfinished[lane]
        if self._lanes[lane]:
            self._ready.append(lane)  # the lane's next job, behind the other lanes
            self._work.notify()
        else:
            del self._lanes[lane]
        self._cond.notify_all()

    def _on_worker(self) -> bool:
        return threading.current_thread() in self._threads

    def _wait(self, done: Callable[[], bool], timeout: float | None) -> bool:
        number("timeout", timeout, minimum=0, allow_none=True)
        if self._on_worker():
            raise UsageError("flush() called from a background job would wait for itself")
        if os.getpid() != self._pid:
            self._reset_after_fork()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not done():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every job submitted so far has run; False if ``timeout`` passed first."""
        return self._wait(lambda: not self._unfinished, timeout)

    def flush_lane(self, lane: str | None, timeout: float | None = None) -> bool:
        """Wait until one lane's jobs (one user's) have run; other lanes are not waited for."""
        return self._wait(lambda: lane not in self._lane_unfinished, timeout)

    async def aflush(self, timeout: float | None = None) -> bool:
        """Async :meth:`flush`: waits in a worker thread, never on the event loop."""
        return await asyncio.to_thread(self.flush, timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Run what is queued, then stop the workers. Later submits run inline.

        Returns False when ``timeout`` passed before the queue drained (the
        workers then finish the remaining jobs on their own, as daemons).
        """
        drained = self.flush(timeout) if not self._on_worker() else False
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._work.notify_all()
        _live.discard(self)
        return drained


def flush_lane_everywhere(lane: str, timeout: float | None = None) -> bool:
    """Wait for one lane's queued jobs on every live queue of this process.

    ``forget`` of a user calls it, so learning queued by any Memory cannot
    write the user's facts back after they were deleted.
    """
    done = True
    for queue in list(_live):
        if not queue._on_worker():
            done = queue.flush_lane(lane, timeout) and done
    return done


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


__all__ = ["AfterReplyBlock", "BackgroundQueue", "current_user", "flush_lane_everywhere"]
