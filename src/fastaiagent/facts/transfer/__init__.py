"""Moving memory between locations: export to a file, import from one, copy.

``export_memory`` writes a location's memory (or one user's) as the versioned
JSONL file of :mod:`fastaiagent.facts.transfer.records`; ``import_memory``
reads one into a location, adding only what the location lacks;
``copy_memory`` does both without a file. Recalled messages travel with their
vectors, so nothing is embedded again. Each reads and writes a page at a
time: memory stays bounded whatever the location's size.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from fastaiagent.facts.store import FactStore
from fastaiagent.facts.transfer.reading import Selection, estimate, header, records
from fastaiagent.facts.transfer.records import (
    FORMAT,
    VERSION,
    Counts,
    check_header,
    read_lines,
    write_lines,
)
from fastaiagent.facts.transfer.writing import run_import

Progress = Callable[[Counts], None]
EVERY = 1000  # records between two progress reports


@contextmanager
def _opened(location: Any) -> Iterator[FactStore]:
    """The store of a location (closed after), or the store passed itself."""
    if not isinstance(location, (str, os.PathLike)):
        yield location
        return
    from fastaiagent.facts.factory import make_fact_store

    store = make_fact_store(str(location))
    try:
        yield store
    finally:
        store.close()


def _counted(lines: Iterator[dict[str, Any]], counts: Counts, progress: Progress | None) -> Iterator[dict[str, Any]]:
    for line in lines:
        counts.add(line["kind"])
        if progress is not None and counts.total % EVERY == 0:
            progress(counts)
        yield line


def export_memory(
    location: Any,
    out: str | os.PathLike[str] | IO[str],
    *,
    user_id: str | None = None,
    project_id: str | None = None,
    progress: Progress | None = None,
) -> Counts:
    """Write the memory of ``location`` (a location string or a FactStore) to ``out``
    (a path or a text stream): every fact with its history and validity, every
    recalled message with its vector, every window (summaries and block state
    in it) and item; with ``user_id``, that user's only (items: those in a
    namespace naming the user); ``project_id`` keeps one project. Returns the counts."""
    selection = Selection(user_id, project_id)
    counts = Counts()
    with _opened(location) as store, _writable(out) as stream:
        write_lines([header(store, selection).line()], stream)
        write_lines(_counted(records(store, selection), counts, progress), stream)
        write_lines([{"kind": "end", "counts": counts.as_dict()}], stream)
    if progress is not None:
        progress(counts)
    return counts


def import_memory(
    location: Any, source: str | os.PathLike[str] | IO[str], *, progress: Progress | None = None
) -> Counts:
    """Add the records of the file ``source`` to ``location``; what it already holds
    is kept (``Counts.kept``), so importing a file twice adds nothing the second time.
    A file of a newer format raises :class:`~fastaiagent.errors.SchemaVersionError`,
    a damaged or cut-off one :class:`~fastaiagent.errors.InvalidValueError` (after
    importing the records before the damage)."""
    with _readable(source) as (stream, name), _opened(location) as store:
        lines = read_lines(stream, name)
        first = check_header(next(lines), name)
        return run_import(store, first, lines, progress, EVERY)


def copy_memory(
    source: Any,
    target: Any,
    *,
    user_id: str | None = None,
    project_id: str | None = None,
    progress: Progress | None = None,
) -> Counts:
    """:func:`export_memory` from ``source`` straight into :func:`import_memory` of
    ``target``, without a file; returns what the target gained."""
    selection = Selection(user_id, project_id)
    with _opened(source) as origin, _opened(target) as store:
        return run_import(store, header(origin, selection), records(origin, selection), progress, EVERY)


def count_records(location: Any, *, user_id: str | None = None, project_id: str | None = None) -> int:
    """About how many records an export or copy of this selection handles (facts and
    recalled messages), for a progress bar."""
    with _opened(location) as store:
        return estimate(store, Selection(user_id, project_id))


@contextmanager
def _writable(out: str | os.PathLike[str] | IO[str]) -> Iterator[IO[str]]:
    if not isinstance(out, (str, os.PathLike)):
        yield out
        return
    with open(out, "w", encoding="utf-8") as stream:
        yield stream


@contextmanager
def _readable(source: str | os.PathLike[str] | IO[str]) -> Iterator[tuple[IO[str], str]]:
    if not isinstance(source, (str, os.PathLike)):
        yield source, getattr(source, "name", "the memory file")
        return
    with open(source, encoding="utf-8") as stream:
        yield stream, str(source)


__all__ = [
    "FORMAT", "VERSION", "Counts", "Selection", "copy_memory", "count_records", "export_memory",
    "import_memory",
]  # fmt: skip
