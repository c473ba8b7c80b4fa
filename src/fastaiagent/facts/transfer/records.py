"""The memory file: one JSON object per line, versioned (see docs/backends.md,
"Moving memory between stores").

The first line is the header (``"kind": "fastaiagent-memory"``, the format
``version``, what was selected, the vector dimension), the last an ``end``
line with the counts, so a cut-off file is told apart from a short one. In
between, one line per fact, recalled message, window or item, each with a
``kind``. A recalled message's vector is float32 little-endian in base64:
exact, and a quarter of its size as JSON numbers.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from fastaiagent._io import decode_json
from fastaiagent.errors import InvalidValueError, SchemaVersionError
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.items import StoredItem
from fastaiagent.facts.windows import WindowKey
from fastaiagent.kb.protocols import Chunk

FORMAT = "fastaiagent-memory"
VERSION = 1
"""The file format's version. A reader refuses a newer one (its lines may mean
more than this reader knows) and reads every older one."""

KINDS = ("fact", "recall", "window", "item")

_FACT_FIELDS = (
    "id", "scope", "scope_id", "project_id", "fact", "confidence", "source", "source_trace_id",
    "metadata", "created_at", "superseded_by", "superseded_at", "valid_from", "valid_to",
)  # fmt: skip


@dataclass
class Header:
    """What a file holds: the selection it was exported with and the recall vectors' size."""

    user_id: str | None = None
    project_id: str | None = None
    dimension: int | None = None
    version: int = VERSION

    def line(self) -> dict[str, Any]:
        return {
            "kind": FORMAT, "version": self.version, "user_id": self.user_id,
            "project_id": self.project_id, "dimension": self.dimension,
        }  # fmt: skip


@dataclass
class Counts:
    """How many records of each kind an export wrote or an import applied;
    ``kept``: records the target already held (an import adds nothing twice)."""

    facts: int = 0
    recall: int = 0
    windows: int = 0
    items: int = 0
    kept: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, n: int = 1) -> None:
        name = {"fact": "facts", "window": "windows", "item": "items"}.get(kind, kind)
        setattr(self, name, getattr(self, name) + n)

    def skip(self, why: str, n: int = 1) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + n

    @property
    def total(self) -> int:
        return self.facts + self.recall + self.windows + self.items

    @property
    def seen(self) -> int:
        """Records handled so far: applied, kept or skipped."""
        return self.total + self.kept + sum(self.skipped.values())

    def as_dict(self) -> dict[str, int]:
        return {"facts": self.facts, "recall": self.recall, "windows": self.windows, "items": self.items}


# -- lines out ------------------------------------------------------------------


def fact_line(fact: Fact) -> dict[str, Any]:
    return {"kind": "fact", **{name: getattr(fact, name) for name in _FACT_FIELDS}}


def recall_line(namespace: str, chunk: Chunk) -> dict[str, Any]:
    assert chunk.vector is not None
    packed = np.asarray(chunk.vector, dtype="<f4").tobytes()
    return {
        "kind": "recall", "namespace": namespace, "id": chunk.id, "text": chunk.text,
        "metadata": chunk.metadata, "vector": base64.b64encode(packed).decode("ascii"),
    }  # fmt: skip


def window_line(key: WindowKey, state: str) -> dict[str, Any]:
    return {"kind": "window", **key._asdict(), "state": state}


def item_line(item: StoredItem) -> dict[str, Any]:
    return {
        "kind": "item", "namespace": list(item.namespace), "key": item.key, "value": item.value,
        "expires_at": item.expires_at,
    }  # fmt: skip


def write_lines(lines: Iterable[dict[str, Any]], out: IO[str]) -> None:
    for line in lines:
        out.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")))
        out.write("\n")


# -- lines in ---------------------------------------------------------------------

MAX_LINE_CHARS = 64 * 1024 * 1024
"""Longest line a reader takes (no record an export writes comes near it): a file of
one endless line is refused without reading it whole."""


def read_lines(source: Iterable[str] | Iterable[bytes] | IO[Any], name: str = "the memory file") -> Iterator[dict[str, Any]]:
    """The file's records after a checked header (yielded first), up to its end line
    (yielded last); a bad line (not UTF-8, not JSON, too long, of an unknown kind)
    raises :class:`InvalidValueError` naming the file and the line's number. ``source``
    is a text or binary stream (a binary one is decoded line by line, so a byte that
    is not UTF-8 is found on its own line)."""
    number = 0
    ended = False
    for number, raw in enumerate(_raw_lines(source, name), start=1):
        text = _decoded(raw, name, number)
        if not text.strip():
            continue
        if ended:
            raise InvalidValueError(f"{name}, line {number}: a line after the end line")
        try:
            line = decode_json(text)
        except json.JSONDecodeError as exc:
            raise InvalidValueError(f"{name}, line {number}: not JSON ({exc.msg})") from None
        if not isinstance(line, dict):
            raise InvalidValueError(f"{name}, line {number}: expected a JSON object")
        if number == 1:
            check_header(line, name)
        elif line.get("kind") == "end":
            ended = True
        elif line.get("kind") not in KINDS:
            raise InvalidValueError(f"{name}, line {number}: unknown kind {line.get('kind')!r}")
        line["_line"] = number
        yield line
    if number == 0:
        raise InvalidValueError(f"{name} is empty: expected a fastaiagent memory export")
    if not ended:
        raise InvalidValueError(
            f"{name} has no end line after line {number}: the export was cut off, so nothing "
            "was imported; export again and import the whole file"
        )


def _raw_lines(source: Any, name: str) -> Iterator[str | bytes]:
    """``source``'s lines, none longer than :data:`MAX_LINE_CHARS`."""
    read = getattr(source, "readline", None)
    lines = iter(lambda: read(MAX_LINE_CHARS + 1), source.read(0)) if read else iter(source)
    number = 0
    while True:
        number += 1
        try:
            raw = next(lines)
        except StopIteration:
            return
        except UnicodeDecodeError as exc:  # a text stream decodes ahead: the line is near
            raise InvalidValueError(f"{name}, near line {number}: not UTF-8 text ({exc.reason})") from None
        if len(raw) > MAX_LINE_CHARS:
            raise InvalidValueError(
                f"{name}, line {number}: longer than {MAX_LINE_CHARS:,} characters; no record of "
                "an export is: the file is not one fastaiagent wrote"
            )
        yield raw


def _decoded(raw: str | bytes, name: str, number: int) -> str:
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidValueError(
            f"{name}, line {number}: not UTF-8 text (byte {exc.start + 1} of the line, "
            f"{exc.reason}): an export is UTF-8; convert the file or export it again"
        ) from None


def check_header(line: dict[str, Any], name: str = "the memory file") -> Header:
    if line.get("kind") != FORMAT:
        raise InvalidValueError(f"{name} is not a fastaiagent memory export (no header line)")
    version = line.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidValueError(f"{name}: the header's version {version!r} is not a number")
    if version > VERSION:
        raise SchemaVersionError(
            f"{name} has format version {version}, but this fastaiagent reads versions up to "
            f"{VERSION}: upgrade the package (pip install -U fastaiagent) to import it"
        )
    for field_name in ("user_id", "project_id"):
        if not isinstance(line.get(field_name), (str, type(None))):
            raise InvalidValueError(f"{name}: the header's {field_name} must be text or null")
    dimension = line.get("dimension")
    if dimension is not None and (type(dimension) is not int or dimension < 1):
        raise InvalidValueError(f"{name}: the header's dimension {dimension!r} is not a size")
    return Header(line.get("user_id"), line.get("project_id"), dimension, version)


def fact_of(line: dict[str, Any]) -> Fact:
    """A fact line's :class:`Fact` (its fields' types checked, not yet its rules)."""
    try:
        values = {name: line[name] for name in _FACT_FIELDS}
    except KeyError as exc:
        raise InvalidValueError(f"a fact without {exc.args[0]!r}") from None
    for name, kind in _TYPES:  # the fields validate_for_write does not check
        if isinstance(values[name], bool) or not isinstance(values[name], kind):
            raise InvalidValueError(f"a fact whose {name} is {type(values[name]).__name__}")
    return Fact(**values)


_NONE = type(None)
_TYPES = (("id", int), ("superseded_by", (int, _NONE)), ("created_at", (int, float)),
          ("superseded_at", (int, float, _NONE)), ("source", str), ("source_trace_id", (str, _NONE)))  # fmt: skip


def chunk_of(line: dict[str, Any]) -> tuple[str, Chunk]:
    """A recall line's namespace and :class:`Chunk` (its vector decoded)."""
    try:
        namespace, chunk_id, text, metadata, packed = (
            line["namespace"], line["id"], line["text"], line["metadata"], line["vector"],
        )  # fmt: skip
    except KeyError as exc:
        raise InvalidValueError(f"a recalled message without {exc.args[0]!r}") from None
    for what, value, kind in (("namespace", namespace, str), ("id", chunk_id, str), ("text", text, str),
                              ("metadata", metadata, dict), ("vector", packed, str)):  # fmt: skip
        if not isinstance(value, kind):
            raise InvalidValueError(f"a recalled message whose {what} is {type(value).__name__}")
    try:
        raw = base64.b64decode(packed, validate=True)
    except ValueError:
        raw = b"?"  # refused just below, in the same words
    if not raw or len(raw) % 4:
        raise InvalidValueError(
            "a recalled message whose vector is not float32 values in base64, as an export writes it"
        )
    vector = np.frombuffer(raw, dtype="<f4")
    return namespace, Chunk(chunk_id, text, vector.tolist(), dict(metadata))


def window_of(line: dict[str, Any]) -> tuple[WindowKey, str]:
    try:
        key, state = WindowKey(line["agent_id"], line["project_id"], line["user_id"]), line["state"]
    except KeyError as exc:
        raise InvalidValueError(f"a window without {exc.args[0]!r}") from None
    if not all(isinstance(part, str) for part in (*key, state)):
        raise InvalidValueError("a window whose agent_id, project_id, user_id or state is not text")
    return key, state


def item_of(line: dict[str, Any]) -> tuple[tuple[str, ...], str, str, float | None]:
    try:
        namespace, key, value, expires = line["namespace"], line["key"], line["value"], line.get("expires_at")
    except KeyError as exc:
        raise InvalidValueError(f"an item without {exc.args[0]!r}") from None
    if not isinstance(namespace, list) or not all(isinstance(part, str) for part in namespace):
        raise InvalidValueError("an item whose namespace is not a list of text")
    if not isinstance(key, str) or not isinstance(value, str):
        raise InvalidValueError("an item whose key or value is not text")
    if expires is not None and (isinstance(expires, bool) or not isinstance(expires, (int, float))):
        raise InvalidValueError("an item whose expires_at is not a time")
    return tuple(namespace), key, value, expires
