"""Re-embedding a store-backed index with another embedder, in the background, with progress.

Every durable chunk records the identity of the embedder that made its vector
(``metadata["embedder"]``, see :mod:`fastaiagent.facts.index.embedding_cache`). When a
Memory starts with another embedder, recall and semantic facts notice it on the
hits of a search (a hit of another identity is never ranked against the new
model's query) and hand the namespace to :func:`reembed_in_background`. A
:class:`Reembedding` job embeds the namespace's texts again in batches (sorted by
length, so a batch pads little), through the index's embedding cache (each text
once, ever), and writes them back by id. A repeat after a crash or restart
skips what is already done.

One index holds one dimension: a model of another size is re-embedded into a
*new* index (``Reembedding(old, embedder, target=new)``), and the old one keeps
serving until the caller switches. Nothing of two sizes is ever mixed. A fact
store keeps an index per size (``store.vector_store(dimension)``);
:func:`carry_over` is what recall calls when a user's messages are held at
another size than its embedder's (the agent's model changed, or another agent
with another model heard them): those the embedder's index lacks are
re-embedded into it in the background, and a carry-over a restart cut short
resumes.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from fastaiagent._exit import at_exit
from fastaiagent._validate import integer
from fastaiagent.errors import InvalidTypeError
from fastaiagent.facts.index.embedding_cache import EMBEDDER_KEY, cached, identity_of
from fastaiagent.facts.vectors import embedded_text
from fastaiagent.kb.identity import same_embedder
from fastaiagent.kb.protocols import Chunk, DimensionMismatchError, namespace_key

logger = logging.getLogger("fastaiagent.facts.index.reembed")

Progress = Callable[["Reembedding"], None]


class BackgroundJob:
    """What the background thread runs (a :class:`Reembedding`, or a
    :class:`~fastaiagent.facts.index.reindex.Reindexing` of keyword postings):
    ``state``, ``wait()``, ``cancel()`` (stop before the next write) and ``run()``."""

    failure = "a background job"  # what failed, in the log line of a failure

    def __init__(self) -> None:
        self.state = "pending"
        self.error: BaseException | None = None
        self._finished = threading.Event()
        self._cancelled = threading.Event()

    def run(self) -> Any:
        raise NotImplementedError

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job ends (True) or ``timeout`` seconds pass (False)."""
        return self._finished.wait(timeout)

    def cancel(self) -> None:
        """Stop before the next write."""
        self._cancelled.set()

    def _run_logged(self) -> None:
        try:
            self.run()
        except Exception as exc:  # kept on the job (error); a later search or open starts another
            logger.warning("%s failed: %s", self.failure, exc)


class Reembedding(BackgroundJob):
    """Re-embed the chunks of ``namespaces`` in ``index`` (None: every namespace it
    holds) with ``embedder``, writing them to ``target`` (default: ``index`` itself).

    ``run()`` does the work on the caller's thread; ``start()`` on a daemon thread.
    ``done`` / ``total`` count chunks, ``state`` is ``"pending"``, ``"running"``,
    ``"done"``, ``"cancelled"`` or ``"failed"`` (``error`` holds the exception);
    ``on_progress`` is called after every batch. A chunk removed meanwhile is not
    written back; ``cancel()`` stops before the next write.
    """

    def __init__(
        self,
        index: Any,
        embedder: Any,
        *,
        namespaces: Sequence[str] | None = None,
        target: Any = None,
        batch_size: int = 64,
        on_progress: Progress | None = None,
    ) -> None:
        for name, obj, needs in (("index", index, "chunks"), ("embedder", embedder, "embed")):
            if not callable(getattr(obj, needs, None)):
                raise InvalidTypeError(f"{name} must have {needs}(), got {type(obj).__name__}")
        if isinstance(namespaces, str):
            raise InvalidTypeError("namespaces must be a list of namespaces, not one str")
        self.index, self.embedder = index, embedder
        self.target = index if target is None else target
        self.namespaces = None if namespaces is None else list(namespaces)
        self.batch_size = integer("batch_size", batch_size, minimum=1)
        self.on_progress = on_progress
        self.identity = identity_of(embedder)
        size, held = getattr(embedder, "dimension", None), getattr(self.target, "dimension", None)
        if size is not None and held is not None and int(size) != int(held):
            raise DimensionMismatchError(
                f"the embedder makes {size}-dimensional vectors but {self.target!r} holds "
                f"{held}-dimensional ones; re-embed into a new index instead: "
                "Reembedding(old_index, embedder, target=new_index)"
            )
        super().__init__()
        self.done = 0
        self.total = 0
        self.failure = f"re-embedding with {self.identity}"

    def __repr__(self) -> str:
        return f"Reembedding({self.state}, {self.done}/{self.total}, identity={self.identity!r})"

    def start(self) -> Reembedding:
        """Run on a daemon thread; returns self. A normal exit of the interpreter stops
        it after its current batch (the next process resumes it)."""
        _stopped_at_exit(self)
        threading.Thread(target=self._run_logged, name="fastaiagent-reembed", daemon=True).start()
        return self

    def run(self) -> Reembedding:
        """Do the whole job here; raises what failed (also kept in ``error``)."""
        self.state = "running"
        started = time.monotonic()
        try:
            todo = self._todo()
            self.total = sum(len(chunks) for chunks in todo.values())
            for namespace, chunks in todo.items():
                self._namespace(namespace, chunks)
            self.state = "cancelled" if self._cancelled.is_set() else "done"
        except BaseException as exc:
            self.state, self.error = "failed", exc
            raise
        finally:
            self._finished.set()  # after the state: a waiter reads the final one
        logger.info(
            "re-embedded %d chunks with %s in %.1f s", self.done, self.identity, time.monotonic() - started
        )
        return self

    def _todo(self) -> dict[str, list[Chunk]]:
        """The chunks to embed again, by namespace (texts only; vectors are not read)."""
        found: dict[str, list[Chunk]] = {}
        sources = [None] if self.namespaces is None else self.namespaces
        into_itself = self.target is self.index
        for namespace in sources:
            held = self._held(namespace)
            for chunk in self.index.chunks(namespace):
                if into_itself and chunk.metadata.get(EMBEDDER_KEY) is not None and same_embedder(
                    chunk.metadata.get(EMBEDDER_KEY), self.identity
                ):
                    continue  # done by an earlier (interrupted) run
                if chunk.id in held:
                    continue  # in another index: already there (an earlier run, another process)
                found.setdefault(namespace_key(chunk.metadata), []).append(chunk)
        return found

    def _held(self, namespace: str | None) -> set[str]:
        """The ids another target already holds of ``namespace`` (none for the index itself)."""
        ids = getattr(self.target, "ids", None)
        if self.target is self.index or namespace is None or not callable(ids):
            return set()
        return set(ids(namespace))

    def _namespace(self, namespace: str, chunks: list[Chunk]) -> None:
        embed = cached(self.embedder, self.target, namespace)
        chunks.sort(key=lambda c: len(c.text))
        for first in range(0, len(chunks), self.batch_size):
            if self._cancelled.is_set():
                return
            batch = chunks[first : first + self.batch_size]
            vectors = embed.embed([embedded_text(c) for c in batch])
            if self._cancelled.is_set():  # a forget while the batch was embedded
                return
            # Written back only while the source still holds them (a forget meanwhile wins).
            alive = {c.id for c in self.index.get([c.id for c in batch])}
            fresh = [
                Chunk(c.id, c.text, list(v), {**c.metadata, EMBEDDER_KEY: self.identity})
                for c, v in zip(batch, vectors, strict=True)
                if c.id in alive
            ]
            if fresh:
                self.target.add(fresh)
            self.done += len(batch)
            if self.on_progress is not None:
                self.on_progress(self)


_jobs: dict[tuple[int, str], BackgroundJob] = {}
_work: queue.Queue[BackgroundJob] = queue.Queue()
_jobs_lock = threading.Lock()
_worker: threading.Thread | None = None


def reembed_in_background(
    index: Any, embedder: Any, namespace: str, *, target: Any = None
) -> Reembedding:
    """The job re-embedding ``namespace`` of ``index`` with ``embedder`` into ``target``
    (default: ``index`` itself) in this process, queued if none is pending or running
    for that target. Jobs are known by their target (:func:`background_job`), which
    is what they write to. Jobs run one at a time on one daemon thread (embedding
    is CPU-bound: two at once would only share the cores)."""
    global _worker
    key = (id(index if target is None else target), namespace)
    with _jobs_lock:
        held = _jobs.get(key)
        if isinstance(held, Reembedding) and held.state in ("pending", "running") and not held._cancelled.is_set():
            return held
        job = _jobs[key] = Reembedding(
            index, embedder, namespaces=[namespace], target=target, on_progress=_log_progress
        )
        _stopped_at_exit(job)
        _work.put(job)
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_drain, name="fastaiagent-reembed", daemon=True)
            _worker.start()
        logger.info("embedder changed to %s: re-embedding %r in the background", job.identity, namespace)
        return job


def queue_job(job: BackgroundJob) -> None:
    """Run ``job`` on the background thread, after the jobs queued before it."""
    global _worker
    with _jobs_lock:
        _stopped_at_exit(job)
        _work.put(job)
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_drain, name="fastaiagent-reembed", daemon=True)
            _worker.start()


def register_job(job: BackgroundJob, index: Any, namespace: str) -> None:
    """Note ``job`` as the one writing ``namespace`` to ``index`` (what
    :func:`stop_background_job`, a forget's first step, cancels)."""
    with _jobs_lock:
        _jobs[(id(index), namespace)] = job


def carry_over(
    target: Any, others: Callable[[], Sequence[Any]], embedder: Any, namespace: str
) -> Reembedding | None:
    """When another size's index holds messages of ``namespace`` that ``target`` (the
    index of ``embedder``'s size) lacks, the background job re-embedding them from
    there (the one holding most of it) into ``target``; else None. ``others()``
    lists every size's index. Searches of ``target`` meanwhile answer from what is
    there: sizes are never mixed.

    A carry-over cut short (the process stopped) left ``target`` holding part of
    them: it resumes, the job skipping what ``target`` holds already."""
    found = [(index.count(namespace), index) for index in others() if index is not target]
    count, source = max(found, key=lambda pair: pair[0], default=(0, None))
    if not count or source is None:
        return None
    holds = getattr(target, "holds", None)  # one row where a count reads them all
    started = holds(namespace) if callable(holds) else target.count(namespace)
    if started and not set(source.ids(namespace)) - set(target.ids(namespace)):
        return None  # carried over before (or said at both sizes): nothing is missing
    logger.info(
        "%r lacks messages of %r at size %s: re-embedding them from %r",
        target, namespace, getattr(embedder, "dimension", None), source,
    )  # fmt: skip
    return reembed_in_background(source, embedder, namespace, target=target)


def stop_background_job(index: Any, namespace: str, timeout: float = 30.0) -> None:
    """Cancel this process's job writing ``namespace`` to ``index`` and wait for its
    last write (at most one batch): what a forget calls first, on every index, so
    no job can write a user back."""
    job = background_job(index, namespace)
    if job is not None and job.state in ("pending", "running"):
        job.cancel()
        if job.state == "running":
            job.wait(timeout)


def background_job(index: Any, namespace: str) -> BackgroundJob | None:
    """The last background job writing ``namespace`` to ``index`` in this process, if any."""
    with _jobs_lock:
        return _jobs.get((id(index), namespace))


_PROGRESS_EVERY = 5.0  # seconds between progress lines of a background job
_last_logged: dict[int, float] = {}


def _log_progress(job: Reembedding) -> None:
    now = time.monotonic()
    if job.done < job.total and now - _last_logged.get(id(job), 0.0) < _PROGRESS_EVERY:
        return
    _last_logged[id(job)] = now
    logger.info("re-embedding %s: %d of %d chunks", job.namespaces, job.done, job.total)
    if job.done >= job.total:
        _last_logged.pop(id(job), None)


EXIT_WAIT = 60.0  # seconds a normal exit waits for a running job's current batch
_live: weakref.WeakSet[BackgroundJob] = weakref.WeakSet()


def _stopped_at_exit(job: BackgroundJob) -> None:
    _live.add(job)
    at_exit(_stop_all)


def _stop_all() -> None:
    """At a normal exit: no job may be inside the embedder when the interpreter tears
    down (native threads destroyed under it abort the process). Every job stops
    before its next batch; what it wrote stays, and the next process resumes."""
    jobs = [job for job in list(_live) if job.state in ("pending", "running")]
    for job in jobs:
        job.cancel()
    for job in jobs:
        if job.state == "running" and not job.wait(EXIT_WAIT):
            logger.warning("%r still running at exit after %.0f s", job, EXIT_WAIT)


def _drain() -> None:
    while True:
        job = _work.get()
        if job._cancelled.is_set():
            job.state = "cancelled"
            job._finished.set()
            continue
        job._run_logged()


def foreign(hit_metadata: dict[str, Any], identity: str) -> bool:
    """True when a stored chunk was embedded by another embedder than ``identity``
    (chunks that record none are taken as this embedder's)."""
    return not same_embedder(hit_metadata.get(EMBEDDER_KEY), identity)


__all__ = [
    "BackgroundJob",
    "Reembedding",
    "background_job",
    "carry_over",
    "foreign",
    "queue_job",
    "reembed_in_background",
    "register_job",
    "stop_background_job",
]
