"""JSON in and out: atomic files (a reader never sees half a file, a failed load
changes nothing) and text from elsewhere decoded with one error for every fault."""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from fastaiagent.errors import InvalidValueError, MissingFileError


@contextmanager
def _replacing(target: Path) -> Iterator[IO[str]]:
    """A text stream into a temp file beside ``target``, renamed over it once written
    whole (fsynced), removed if anything fails. The temp file is created 0600
    (``mkstemp``), so the file that replaces ``target`` is its owner's only."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as JSON through a temp file in the same directory, then rename."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _replacing(target) as handle:
        json.dump(data, handle, ensure_ascii=False)


@contextmanager
def private_text_file(path: str | os.PathLike[str]) -> Iterator[IO[str]]:
    """A text stream whose content becomes the file ``path``, readable by its owner only.

    For personal data (a user's exported memory): written to a temp file in the
    same directory, created mode 0600, then renamed over ``path``, so the file is
    0600 whether or not it existed before (its old mode and content are replaced
    whole, never left half-written). A symlink is followed to the file it names.
    A path that is not a regular file (``/dev/stdout``, a pipe) is written as it is.
    """
    target = Path(os.path.realpath(path))
    if target.exists() and not stat.S_ISREG(target.stat().st_mode):
        with open(target, "w", encoding="utf-8") as stream:
            yield stream
        return
    with _replacing(target) as stream:  # created 0600: the point of this function
        yield stream


# Deeper JSON is refused before the C encoder or decoder recurse into it: run
# near the interpreter's recursion limit, any finaliser the garbage collector
# calls meanwhile fails with an unraisable RecursionError of its own.
MAX_JSON_DEPTH = 200
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def json_text_too_deep(text: str, start: int = 0) -> bool:
    """Whether the JSON in ``text`` from ``start`` nests deeper than
    :data:`MAX_JSON_DEPTH` (strings skipped; counting brackets settles most texts)."""
    if text.count("[", start) + text.count("{", start) <= MAX_JSON_DEPTH:
        return False
    depth = 0
    for token in _JSON_TOKEN.finditer(text, start):
        bracket = token.group()
        if bracket in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return True
        elif bracket in "]}":
            depth -= 1
            if depth <= 0:
                return False
    return False


def json_value_too_deep(value: Any) -> bool:
    """Whether dicts and lists in ``value`` nest deeper than :data:`MAX_JSON_DEPTH`."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, (dict, list, tuple)):
            if depth > MAX_JSON_DEPTH:
                return True
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
    return False


def decode_json(text: str | bytes) -> Any:
    """``json.loads(text)``; a value nested too deeply to decode raises
    ``json.JSONDecodeError`` like any other bad input."""
    if isinstance(text, bytes) and text.count(b"[") + text.count(b"{") <= MAX_JSON_DEPTH:
        return json.loads(text)
    doc = text if isinstance(text, str) else text.decode("utf-8", "replace")
    if json_text_too_deep(doc):
        raise json.JSONDecodeError("nested too deeply", doc[:200], 0)
    return json.loads(doc)


_SCAN_ONCE: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def decode_own_json(text: str) -> Any:
    """:func:`decode_json` of a text this library wrote (``json.dumps``: nothing around
    the value), at half the cost: the C scanner is called straight, without the two
    whitespace matches of ``json.loads`` (a search decodes ~40 stored metadata texts).
    A text the scanner does not read whole goes through :func:`decode_json`."""
    if text.count("{") + text.count("[") <= MAX_JSON_DEPTH:
        try:
            value, end = _SCAN_ONCE(text, 0)
        except StopIteration:
            pass
        else:
            if end == len(text):
                return value
    return decode_json(text)


def read_json(path: str | os.PathLike[str], *, what: str = "memory file") -> Any:
    """Read a JSON file; a missing or corrupt file raises with the path in the message."""
    source = Path(path)
    if not source.is_file():
        raise MissingFileError(f"{what} not found: {source}")
    try:
        return decode_json(source.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidValueError(f"{what} {source} is corrupt: {exc}") from exc
