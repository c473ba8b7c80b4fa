"""Writing the file's records into a location, idempotently.

A fact the target already holds (same subject, same normalised text, same
``created_at``) is kept, not added again; supersede links are replayed
between the target's ids, so a fact's history arrives as history. Recalled
messages keep their ids, text, metadata (the embedder's identity among it)
and vectors: nothing is embedded again, and an id the target holds is
left as it is. A window is written only where the target has none for that
key; an item only where it has no live item of that key.

Records arrive checked (:class:`~fastaiagent.facts.transfer.scope.LineCheck`).
What the writer remembers of a subject (the target's facts by fingerprint,
the file's ids as the target's) is in :class:`SpillMap` tables, and pending
messages are written a batch at a time: memory is bounded by a page, whatever
the size of a subject or the number of namespaces.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import replace
from typing import Any

from fastaiagent.errors import FastAIAgentError, InvalidValueError
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.items import HoldsItems, ItemWrite
from fastaiagent.facts.scoping import normalize_text
from fastaiagent.facts.store import FactStore
from fastaiagent.facts.transfer.reading import subject_pages
from fastaiagent.facts.transfer.records import Counts
from fastaiagent.facts.transfer.scope import LineCheck
from fastaiagent.facts.transfer.spill import SpillMap
from fastaiagent.facts.vectors import HoldsVectors, ListsDimensions
from fastaiagent.facts.windows import HoldsWindows
from fastaiagent.kb.protocols import Chunk

logger = logging.getLogger(__name__)

BATCH = 500  # recalled messages one vector write takes (and at most this many wait)
Subject = tuple[str, str, str]
FactCheck = Callable[[Fact], "Fact | None"]
"""What a user's import does with each active fact before writing it (the fact
policy): the fact to write (e.g. flagged), or None to leave it out."""
DROPPED = "facts the fact policy dropped"


def _fingerprint(fact: Fact) -> str:
    return f"{float(fact.created_at)!r} {normalize_text(fact.fact)}"


class Importer:
    """Applies checked records to ``store`` in file order; :meth:`finish` flushes the rest.
    ``fact_check`` judges each active fact first (see :data:`FactCheck`)."""

    def __init__(self, store: FactStore, counts: Counts, fact_check: FactCheck | None = None) -> None:
        self.store, self.counts, self.fact_check = store, counts, fact_check
        self.vectors = store.vector_store() if isinstance(store, HoldsVectors) else None
        self.windows = store.window_store() if isinstance(store, HoldsWindows) else None
        self.items = store.item_store() if isinstance(store, HoldsItems) else None
        # A store with an index per vector size takes every size: each message goes
        # to its own size's index. A store of one size takes its size only (checked).
        self.sized = isinstance(store, ListsDimensions)
        self._subject: Subject | None = None
        self._held = SpillMap()  # fingerprint -> (target id, superseded by)
        self._held_ids = SpillMap()  # the subject's ids in the target
        self._ids = SpillMap()  # the file's fact id -> (the target's, None)
        self._waiting: dict[int, list[tuple[int, float | None]]] = {}
        self._chunks: dict[tuple[str, int], list[Chunk]] = {}  # by namespace and vector size
        self._pending = 0

    def apply(self, kind: str, record: Any) -> None:
        if kind == "fact":
            self._fact(record)
        elif kind == "recall":
            self._chunk(*record)
        elif kind == "window":
            self._window(*record)
        elif kind == "item":
            self._item(*record)

    def finish(self) -> None:
        self._close_subject()
        self._flush_all()

    # -- facts ----------------------------------------------------------------

    def _fact(self, fact: Fact) -> None:
        file_id = fact.id
        assert file_id is not None  # LineCheck: every fact line has an int id
        subject = (fact.scope, fact.scope_id, fact.project_id)
        if subject != self._subject:
            self._open_subject(subject)
        if fact.superseded_by is None and self.fact_check is not None:
            judged = self.fact_check(fact)
            if judged is None:  # as a dropped update live: the version before stays active
                self.counts.skip(DROPPED)
                self._waiting.pop(file_id, None)
                return
            fact = judged
        fingerprint = _fingerprint(fact)
        held = self._held.get(fingerprint)
        if held is not None:
            target, superseded_by = held
            self.counts.kept += 1
        else:
            fresh = replace(fact, id=None, superseded_by=None, superseded_at=None)
            target, superseded_by = self.store.add(fresh), None
            self._held.put(fingerprint, (target, None))
            if str(target) in self._held_ids:  # the target's active fact of that text, kept
                self.counts.kept += 1
            else:
                self._held_ids.put(str(target), (target, None))
                self.counts.add("fact")
        self._ids.put(str(file_id), (target, None))
        if fact.superseded_by is not None:
            known = self._ids.get(str(fact.superseded_by))
            newer = None if known is None else known[0]
            if newer is None:
                self._waiting.setdefault(fact.superseded_by, []).append((target, fact.superseded_at))
            elif superseded_by != newer:
                self._supersede(target, newer, fact.superseded_at)
        for older, at in self._waiting.pop(file_id, []):
            self._supersede(older, target, at)

    def _supersede(self, old: int, new: int, at: float | None) -> None:
        try:
            self.store.supersede(old, new, at=at)
        except (InvalidValueError, KeyError) as exc:
            current = self.store.get(old)
            if current is None or current.superseded_by != new:  # not a repeat: report it
                logger.warning("import: fact #%s cannot be marked replaced by #%s: %s", old, new, exc)
                self.counts.skip("history links the target refused")

    def _open_subject(self, subject: Subject) -> None:
        self._close_subject()
        self._subject = subject
        for page in subject_pages(self.store, *subject, size=BATCH):
            for fact in page:
                assert fact.id is not None
                self._held_ids.put(str(fact.id), (fact.id, None))
                self._held.put(_fingerprint(fact), (fact.id, fact.superseded_by))

    def _close_subject(self) -> None:
        orphans = sum(len(older) for older in self._waiting.values())
        if orphans:  # their newer version was not in the file (deleted before the export)
            self.counts.skip("superseded facts whose newer version was not exported", orphans)
        self._waiting = {}
        for table in (self._held, self._held_ids, self._ids):
            table.close()

    # -- recalled messages --------------------------------------------------------

    def _chunk(self, namespace: str, chunk: Chunk) -> None:
        if self.vectors is None:
            self.counts.skip("recalled messages (the target keeps no vectors)")
            return
        key = (namespace, len(chunk.vector or ()))
        pending = self._chunks.setdefault(key, [])
        pending.append(chunk)
        self._pending += 1
        if len(pending) >= BATCH:
            self._flush(key)
        elif self._pending >= BATCH:  # many namespaces, a few messages each
            self._flush_all()

    def _flush_all(self) -> None:
        for key in list(self._chunks):
            self._flush(key)

    def _flush(self, key: tuple[str, int]) -> None:
        pending = self._chunks.pop(key, [])
        self._pending -= len(pending)
        if not pending or self.vectors is None:
            return
        vectors = self.store.vector_store(key[1]) if self.sized else self.vectors  # type: ignore[attr-defined]
        held = {c.id for c in vectors.get([c.id for c in pending])}
        new = [c for c in pending if c.id not in held]
        if new:
            vectors.add(new)
        self.counts.add("recall", len(new))
        self.counts.kept += len(held)

    # -- windows and items --------------------------------------------------------

    def _window(self, key: Any, state: str) -> None:
        if self.windows is None:
            self.counts.skip("windows (the target keeps no windows)")
        elif self.windows.save(key, state, None, None) is None:
            self.counts.kept += 1  # the target has a window for that key: it stays
        else:
            self.counts.add("window")

    def _item(self, namespace: tuple[str, ...], key: str, value: str, expires: float | None) -> None:
        if self.items is None:
            self.counts.skip("items (the target keeps no items)")
            return
        ttl = None if expires is None else expires - time.time()
        if ttl is not None and ttl <= 0:
            self.counts.skip("items that expired meanwhile")
            return
        changed = self.items.write([ItemWrite(namespace, key, value, ttl, if_absent=True)])
        if changed and changed[0]:
            self.counts.add("item")
        else:
            self.counts.kept += 1


def run_import(
    store: FactStore,
    lines: Iterable[dict[str, Any]],
    check: LineCheck,
    fact_check: FactCheck | None = None,
    progress: Callable[[Counts], None] | None = None,
    every: int = 1000,
) -> Counts:
    """Apply ``lines`` (records after the header, up to the end line), each read by
    ``check``, to ``store``."""
    counts = Counts()
    importer = Importer(store, counts, fact_check)
    seen = 0
    try:
        for line in lines:
            if line.get("kind") == "end":
                break
            importer.apply(*check(line))
            seen += 1
            if progress is not None and seen % every == 0:
                progress(counts)
    except BaseException:
        with suppress(FastAIAgentError):  # keep what came before; report the first error
            importer.finish()
        raise
    importer.finish()
    if progress is not None:
        progress(counts)
    return counts
