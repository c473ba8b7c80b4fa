"""Keyword postings built again, in the background, when the text analyzer changed.

Each stored index records the analyzer version its postings were built with
(:data:`~fastaiagent.facts.vectors.ANALYZER_VERSION`: SQLite and Postgres in
the index's meta table, Redis under ``<prefix>:vec:analyzer``), next to its
dimension. An index without a record was built before versions were
recorded: by version 1, the analyzer of that release. When an index is opened
(its first use in the process) with another version than it records,
:func:`analyzer_opened` queues a :class:`Reindexing` on the one background
thread that re-embeds for a changed embedder
(:mod:`fastaiagent.facts.index.reembed`): it writes every chunk back with its
own text, metadata and vector, namespace by namespace, a page at a time, so its
postings are made by today's analyzer; then it records the version.

Meanwhile reads stay correct, chunk by chunk: a query (tokenized today) finds
every chunk on the terms the two analyzers share, and a chunk written again
on every term; only a term the old analyzer made differently misses the
chunks not reached yet. Dense search is untouched (the vectors are the
same). A forget stops the job (``stop_background_job``) as it stops a
re-embedding; the next process that opens the index starts it again.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from fastaiagent.facts import vectors as _vectors
from fastaiagent.facts.index import reembed

logger = logging.getLogger("fastaiagent.facts.index.reindex")

FIRST_VERSION = 1
"""The version an index records none of: built before versions were recorded."""

PAGE = 200  # chunks written back per transaction


def current_version() -> int:
    """Today's analyzer version (read at call time: a test can stand in another)."""
    return int(_vectors.ANALYZER_VERSION)


class Reindexing(reembed.BackgroundJob):
    """Write every chunk of ``index`` back (its postings made by today's analyzer),
    then record the version. ``run()`` on the caller's thread; queued by
    :func:`analyzer_opened`. ``state``, ``done``, ``wait()`` and ``cancel()`` as a
    :class:`~fastaiagent.facts.index.reembed.Reembedding`'s."""

    def __init__(self, index: Any, version: int) -> None:
        super().__init__()
        self.index, self.version, self.done = index, version, 0
        self.failure = f"rebuilding the keyword postings of {index!r}"

    def __repr__(self) -> str:
        return f"Reindexing({self.state}, {self.done} chunks, version={self.version})"

    def run(self) -> Reindexing:
        """Do the whole job here; raises what failed (also kept in ``error``)."""
        self.state = "running"
        try:
            for namespace in sorted(self.index.namespace_names()):
                reembed.register_job(self, self.index, namespace)  # a forget of it stops the job
                self._namespace(namespace)
                if self._cancelled.is_set():
                    break
            if not self._cancelled.is_set():
                self.index.write_analyzer(self.version)
            self.state = "cancelled" if self._cancelled.is_set() else "done"
        except BaseException as exc:
            self.state, self.error = "failed", exc
            raise
        finally:
            self._finished.set()
        logger.info("keyword postings of %r rebuilt: %d chunks", self.index, self.done)
        return self

    def _namespace(self, namespace: str) -> None:
        for page in self.index.vector_pages(namespace, PAGE):
            if self._cancelled.is_set():
                return
            # Written back only while the index still holds them (a forget meanwhile wins).
            alive = {chunk.id for chunk in self.index.get([chunk.id for chunk in page])}
            again = [chunk for chunk in page if chunk.id in alive]
            if again:
                self.index.add(again)
            self.done += len(page)


_jobs: dict[int, Reindexing] = {}
_lock = threading.Lock()


def analyzer_opened(index: Any, recorded: int | None) -> str:
    """What an index opened with ``recorded`` (its stored version, None: none) does:
    ``"current"`` (nothing), ``"record"`` (the caller records today's version now:
    a new index, or one of version 1 while version 1 is today's) or ``"rebuild"``
    (a :class:`Reindexing` of it is queued)."""
    version, held = current_version(), FIRST_VERSION if recorded is None else int(recorded)
    if held == version:
        return "record" if recorded is None else "current"
    with _lock:
        job = _jobs.get(id(index))
        if job is None or job.state not in ("pending", "running"):
            job = _jobs[id(index)] = Reindexing(index, version)
            logger.info("%r holds postings of analyzer %d, not %d: rebuilding them", index, held, version)
            reembed.queue_job(job)
    return "rebuild"


def reindex_job(index: Any) -> Reindexing | None:
    """The last job rebuilding ``index``'s postings in this process, if any."""
    with _lock:
        return _jobs.get(id(index))


__all__ = ["FIRST_VERSION", "PAGE", "Reindexing", "analyzer_opened", "current_version", "reindex_job"]
