"""Writing the file's records into a location, idempotently.

A fact the target already holds (same subject, same normalised text, same
``created_at``) is kept, not added again; supersede links are replayed
between the target's ids, so a fact's history arrives as history. Recalled
messages keep their ids, text, metadata (the embedder's identity among it)
and vectors: nothing is embedded again, and an id the target holds is
left as it is. A window is written only where the target has none for that
key; an item only where it has no live item of that key.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace
from typing import Any

from fastaiagent.errors import FastAIAgentError, InvalidValueError
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.items import HoldsItems, ItemWrite
from fastaiagent.facts.scoping import normalize_text
from fastaiagent.facts.store import FactStore
from fastaiagent.facts.transfer.reading import subject_pages
from fastaiagent.facts.transfer.records import (
    Counts,
    Header,
    chunk_of,
    fact_of,
    item_of,
    window_of,
)
from fastaiagent.facts.vectors import HoldsVectors, ListsDimensions
from fastaiagent.facts.windows import HoldsWindows
from fastaiagent.kb.protocols import Chunk, DimensionMismatchError

logger = logging.getLogger(__name__)

BATCH = 500  # recalled messages one vector write takes
Subject = tuple[str, str, str]
Fingerprint = tuple[str, float]  # (normalised text, created_at)


class Importer:
    """Applies records to ``store`` in file order; :meth:`finish` flushes the rest."""

    def __init__(self, store: FactStore, header: Header, counts: Counts) -> None:
        self.store, self.counts = store, counts
        self.vectors = store.vector_store() if isinstance(store, HoldsVectors) else None
        self.windows = store.window_store() if isinstance(store, HoldsWindows) else None
        self.items = store.item_store() if isinstance(store, HoldsItems) else None
        # A store with an index per vector size takes every size: each message goes
        # to its own size's index. A store of one size takes the file's size only.
        self.sized = isinstance(store, ListsDimensions)
        if not self.sized:
            self._check_dimension(header.dimension)
        self._subject: Subject | None = None
        self._held: dict[Fingerprint, tuple[int, int | None]] = {}  # target id, superseded by
        self._held_ids: set[int] = set()  # the subject's ids in the target
        self._ids: dict[int, int] = {}  # the file's fact id -> the target's
        self._waiting: dict[int, list[tuple[int, float | None]]] = {}
        self._chunks: dict[tuple[str, int], list[Chunk]] = {}  # by namespace and vector size

    def _check_dimension(self, size: int | None) -> None:
        have = self.vectors.dimension if self.vectors is not None else None
        if size is not None and have is not None and size != have:
            raise DimensionMismatchError(
                f"the file's recalled messages have {size}-dimensional vectors, but the target "
                f"index holds {have}-dimensional ones (another embedder): import into a "
                "location whose vector index is empty or of the same embedder"
            )

    def apply(self, line: dict[str, Any]) -> None:
        kind = line["kind"]
        if kind == "fact":
            self._fact(fact_of(line))
        elif kind == "recall":
            self._chunk(*chunk_of(line))
        elif kind == "window":
            self._window(*window_of(line))
        elif kind == "item":
            self._item(*item_of(line))

    def finish(self) -> None:
        self._close_subject()
        for key in list(self._chunks):
            self._flush(key)

    # -- facts ----------------------------------------------------------------

    def _fact(self, fact: Fact) -> None:
        if fact.id is None:
            raise InvalidValueError("a fact line without an id")
        subject = (fact.scope, fact.scope_id, fact.project_id)
        if subject != self._subject:
            self._open_subject(subject)
        fingerprint = (normalize_text(fact.fact), float(fact.created_at))
        held = self._held.get(fingerprint)
        if held is not None:
            target, superseded_by = held
            self.counts.kept += 1
        else:
            fresh = replace(fact, id=None, superseded_by=None, superseded_at=None)
            target, superseded_by = self.store.add(fresh), None
            self._held[fingerprint] = (target, None)
            if target in self._held_ids:  # the target's active fact of that text, kept
                self.counts.kept += 1
            else:
                self._held_ids.add(target)
                self.counts.add("fact")
        self._ids[fact.id] = target
        if fact.superseded_by is not None:
            newer = self._ids.get(fact.superseded_by)
            if newer is None:
                self._waiting.setdefault(fact.superseded_by, []).append((target, fact.superseded_at))
            elif superseded_by != newer:
                self._supersede(target, newer, fact.superseded_at)
        for older, at in self._waiting.pop(fact.id, []):
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
        self._subject, self._ids, self._held, self._held_ids = subject, {}, {}, set()
        for page in subject_pages(self.store, *subject, size=BATCH):
            for fact in page:
                assert fact.id is not None
                self._held_ids.add(fact.id)
                self._held[(normalize_text(fact.fact), float(fact.created_at))] = (
                    fact.id, fact.superseded_by,
                )  # fmt: skip

    def _close_subject(self) -> None:
        orphans = sum(len(older) for older in self._waiting.values())
        if orphans:  # their newer version was not in the file (deleted before the export)
            self.counts.skip("superseded facts whose newer version was not exported", orphans)
        self._waiting = {}

    # -- recalled messages --------------------------------------------------------

    def _chunk(self, namespace: str, chunk: Chunk) -> None:
        if self.vectors is None:
            self.counts.skip("recalled messages (the target keeps no vectors)")
            return
        key = (namespace, len(chunk.vector or ()))
        pending = self._chunks.setdefault(key, [])
        pending.append(chunk)
        if len(pending) >= BATCH:
            self._flush(key)

    def _flush(self, key: tuple[str, int]) -> None:
        pending = self._chunks.pop(key, [])
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
    header: Header,
    lines: Any,
    progress: Callable[[Counts], None] | None = None,
    every: int = 1000,
) -> Counts:
    """Apply ``lines`` (records after the header, up to the end line) to ``store``."""
    counts = Counts()
    importer = Importer(store, header, counts)
    seen = 0
    try:
        for line in lines:
            if line.get("kind") == "end":
                break
            importer.apply(line)
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
