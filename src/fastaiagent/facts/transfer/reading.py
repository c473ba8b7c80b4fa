"""Reading a location's memory as the file's records, a page at a time.

Facts go subject by subject, oldest first, so an import can replay each
subject's history in the order it was written (a superseded text added again
later must not be taken for the active one). A subject is read newest first
(the stores' order) a page at a time; a subject of more than one page is
spooled to a temporary file and replayed backwards, so memory stays bounded
whatever its size.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any
from urllib.parse import unquote

from fastaiagent.facts.fact import Fact
from fastaiagent.facts.items import HoldsItems
from fastaiagent.facts.semantic import subject_namespace
from fastaiagent.facts.store import FactStore, SubjectCount
from fastaiagent.facts.transfer.records import (
    Header,
    fact_line,
    item_line,
    recall_line,
    window_line,
)
from fastaiagent.facts.vectors import HoldsVectors, every_vector_index
from fastaiagent.facts.windows import HoldsWindows, ListsWindows

PAGE = 1000  # facts, chunks or items one read returns


@dataclass(frozen=True)
class Selection:
    """What an export reads: one user (``user_id``) or everything (None); one
    project (``project_id``) or every project (None)."""

    user_id: str | None = None
    project_id: str | None = None

    def takes_subject(self, subject: SubjectCount) -> bool:
        if self.project_id is not None and subject.project_id != self.project_id:
            return False
        return self.user_id is None or (subject.scope, subject.scope_id) == ("user", self.user_id)

    def takes_namespace(self, namespace: str) -> bool:
        """A recall namespace of the selection: ``[<project>:]user:<id>`` for a user."""
        if is_fact_namespace(namespace):
            return False  # derived from the facts, keyed by this store's fact ids
        head = f"{self.project_id}:user:" if self.project_id else "user:"
        if self.user_id is None:
            if self.project_id is None:
                return True
            return namespace.startswith(head) or (not self.project_id and namespace == "default")
        base = f"user:{self.user_id}"
        if self.project_id is None:
            return namespace == base or namespace.endswith(f":{base}")
        return namespace == head + self.user_id


def is_fact_namespace(namespace: str) -> bool:
    """A semantic-fact namespace (``facts:<project>:<scope>:<id>``, parts quoted)."""
    parts = namespace.split(":")
    return len(parts) == 4 and parts[0] == "facts" and namespace == subject_namespace(
        (parts[2], unquote(parts[3]), unquote(parts[1]))
    )


def header(store: FactStore, selection: Selection) -> Header:
    vectors = _vectors(store)
    return Header(selection.user_id, selection.project_id, vectors.dimension if vectors else None)


def estimate(store: FactStore, selection: Selection) -> int:
    """About how many records :func:`records` yields (facts and recalled messages;
    windows and items are few), for a progress bar."""
    total = sum(s.count for s in store.subjects(include_superseded=True) if selection.takes_subject(s))
    for vectors in every_vector_index(store):
        total += sum(vectors.count(ns) for ns in vectors.namespace_names() if selection.takes_namespace(ns))
    return total


def records(store: FactStore, selection: Selection) -> Iterator[dict[str, Any]]:
    """Every record of the selection: facts, recalled messages, windows, items."""
    yield from _facts(store, selection)
    yield from _recall(store, selection)
    yield from _windows(store, selection)
    yield from _items(store, selection)


def _facts(store: FactStore, selection: Selection) -> Iterator[dict[str, Any]]:
    subjects = store.subjects(include_superseded=True)
    for subject in sorted(subjects, key=lambda s: (s.project_id, s.scope, s.scope_id)):
        if selection.takes_subject(subject):
            for fact in oldest_first(store, subject):
                yield fact_line(fact)


def subject_pages(
    store: FactStore, scope: str, scope_id: str, project_id: str, size: int = PAGE
) -> Iterator[list[Fact]]:
    """A subject's facts (history and expired ones too), ``size`` at a time, newest
    first (the stores' order); the last page is short (or the only one empty)."""
    offset = 0
    while True:
        page = store.browse(
            scope=scope, scope_id=scope_id, project_id=project_id, include_superseded=True,
            include_expired=True, limit=size, offset=offset,
        )  # fmt: skip
        yield page
        if len(page) < size:
            return
        offset += size


def oldest_first(store: FactStore, subject: SubjectCount) -> Iterator[Fact]:
    """A subject's facts (history and expired ones too), oldest first."""
    pages = subject_pages(store, subject.scope, subject.scope_id, subject.project_id, PAGE)
    first = next(pages)
    if len(first) < PAGE:
        yield from reversed(first)
        return
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:
        starts = []
        for page in chain([first], pages):
            if page:
                starts.append(spool.tell())
                spool.write(json.dumps([f.to_dict() for f in page]) + "\n")
        for start in reversed(starts):
            spool.seek(start)
            yield from (Fact(**values) for values in reversed(json.loads(spool.readline())))


def _vectors(store: FactStore) -> Any:
    return store.vector_store() if isinstance(store, HoldsVectors) else None


def _recall(store: FactStore, selection: Selection) -> Iterator[dict[str, Any]]:
    """Recalled messages of every vector size the store holds (an agent whose
    embedder differs in size keeps its own index): each line's vector has its size."""
    for vectors in every_vector_index(store):
        for namespace in vectors.namespace_names():
            if selection.takes_namespace(namespace):
                for page in vectors.vector_pages(namespace, PAGE):
                    for chunk in page:
                        yield recall_line(namespace, chunk)


def _windows(store: FactStore, selection: Selection) -> Iterator[dict[str, Any]]:
    windows = store.window_store() if isinstance(store, HoldsWindows) else None
    if not isinstance(windows, ListsWindows):
        return
    for key in windows.window_keys(selection.project_id, selection.user_id):
        found = windows.load(key)
        if found is not None and found.state is not None:
            yield window_line(key, found.state)


def _items(store: FactStore, selection: Selection) -> Iterator[dict[str, Any]]:
    items = store.item_store() if isinstance(store, HoldsItems) else None
    if items is None:
        return
    for namespace in items.namespaces():
        if selection.user_id is not None and selection.user_id not in namespace:
            continue
        offset = 0
        while True:
            found = items.scan(namespace, exact=True, limit=PAGE, offset=offset)
            yield from (item_line(item) for item in found)
            if len(found) < PAGE:
                break
            offset += PAGE
