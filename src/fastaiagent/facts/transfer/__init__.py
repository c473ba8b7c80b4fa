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
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import IO, Any

from fastaiagent._io import private_text_file
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
from fastaiagent.facts.transfer.scope import KEPT_SOURCES, ImportScope, LineCheck, import_scope
from fastaiagent.facts.transfer.writing import FactCheck, run_import
from fastaiagent.facts.vectors import HoldsVectors, ListsDimensions

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
    location: Any,
    source: str | os.PathLike[str] | IO[str] | IO[bytes],
    *,
    everything: bool = False,
    user_id: str | None = None,
    project_id: str | None = None,
    fact_check: FactCheck | None = None,
    progress: Progress | None = None,
) -> Counts:
    """Add the records of the file ``source`` to ``location``; what it already holds
    is kept (``Counts.kept``), so importing a file twice adds nothing the second time.

    The file is read twice: first every line is checked, then written, so a file
    with one bad line writes nothing. A file exported for one user is a user's
    import: every line must be that user's (``user_id``, when given, must be the
    user the file names; ``project_id``, when given, its project) and carry only
    what a live write of theirs could (see :mod:`fastaiagent.facts.transfer.scope`);
    ``fact_check`` then judges each active fact (the fact policy). A whole location's
    file is imported only with ``everything=True``, every line as written.

    A file of a newer format raises :class:`~fastaiagent.errors.SchemaVersionError`;
    a damaged, cut-off or out-of-scope one :class:`~fastaiagent.errors.InvalidValueError`
    naming the file and line."""
    with _replayable(source) as (read, name), _opened(location) as store:
        lines = read_lines(read(), name)
        scope = import_scope(check_header(next(lines), name), name, everything=everything,
                             user_id=user_id, project_id=project_id)  # fmt: skip
        check = _line_check(store, scope, name)
        for line in lines:  # the first pass: check every line, write nothing
            if line["kind"] != "end":
                check(line)
        lines = read_lines(read(), name)
        next(lines)
        return run_import(store, lines, _line_check(store, scope, name), fact_check, progress, EVERY)


def copy_memory(
    source: Any,
    target: Any,
    *,
    user_id: str | None = None,
    project_id: str | None = None,
    progress: Progress | None = None,
) -> Counts:
    """:func:`export_memory` from ``source`` straight into ``target``, without a file;
    returns what the target gained. An operator's move: the records are the
    selection's by construction and keep their sources; each passes the checks of
    a live write as it is copied (a refused one stops the copy there, and a copy
    run again after the fix goes on where it stopped)."""
    selection = Selection(user_id, project_id)
    with _opened(source) as origin, _opened(target) as store:
        check = _line_check(store, ImportScope(), "the copy's source")
        return run_import(store, records(origin, selection), check, None, progress, EVERY)


def _line_check(store: FactStore, scope: ImportScope, name: str) -> LineCheck:
    """The check of a file's lines for ``store``: a store with an index per vector size
    takes every size; another takes its own size only (the first line's when empty)."""
    if isinstance(store, ListsDimensions) or not isinstance(store, HoldsVectors):
        return LineCheck(scope, name, dimension=None, one_size=False)
    return LineCheck(scope, name, dimension=store.vector_store().dimension, one_size=True)


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
    with private_text_file(out) as stream:  # a user's personal data: 0600, written whole
        yield stream


@contextmanager
def _replayable(source: Any) -> Iterator[tuple[Callable[[], IO[Any]], str]]:
    """``(read, name)``: ``read()`` gives the file from its start each time it is called
    (a path is opened in binary, so each line is decoded on its own; a stream that
    cannot seek is spooled to a temporary file the first time)."""
    with ExitStack() as opened:
        if isinstance(source, (str, os.PathLike)):
            yield (lambda: opened.enter_context(open(source, "rb"))), str(source)
            return
        name = getattr(source, "name", "the memory file")
        if source.seekable():
            start = source.tell()

            def again() -> IO[Any]:
                source.seek(start)
                return source

            yield again, str(name)
            return
        spool = opened.enter_context(tempfile.TemporaryFile())
        for chunk in iter(lambda: source.read(1 << 20), source.read(0)):
            spool.write(chunk.encode("utf-8", "surrogatepass") if isinstance(chunk, str) else chunk)

        def from_spool() -> IO[Any]:
            spool.seek(0)
            return spool

        yield from_spool, str(name)


__all__ = [
    "FORMAT", "KEPT_SOURCES", "VERSION", "Counts", "FactCheck", "ImportScope", "Selection", "copy_memory",
    "count_records", "export_memory", "import_memory",
]  # fmt: skip
