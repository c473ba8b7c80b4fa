"""JSON in and out: atomic files (a reader never sees half a file, a failed load
changes nothing) and text from elsewhere decoded with one error for every fault."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from fastaiagent.errors import InvalidValueError, MissingFileError


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as JSON through a temp file in the same directory, then rename."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, ensure_ascii=False)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def decode_json(text: str | bytes) -> Any:
    """``json.loads(text)``; a value nested too deeply to decode raises
    ``json.JSONDecodeError`` like any other bad input (the decoder's own
    RecursionError would escape every handler written for bad JSON)."""
    try:
        return json.loads(text)
    except RecursionError:
        doc = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise json.JSONDecodeError("nested too deeply", doc[:200], 0) from None


def read_json(path: str | os.PathLike[str], *, what: str = "memory file") -> Any:
    """Read a JSON file; a missing or corrupt file raises with the path in the message."""
    source = Path(path)
    if not source.is_file():
        raise MissingFileError(f"{what} not found: {source}")
    try:
        return decode_json(source.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidValueError(f"{what} {source} is corrupt: {exc}") from exc
