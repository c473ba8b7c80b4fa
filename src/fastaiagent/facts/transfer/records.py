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


def read_lines(source: IO[str], name: str = "the memory file") -> Iterator[dict[str, Any]]:
    """The file's records after a checked header (yielded first), up to its end line
    (yielded last); a bad line raises :class:`InvalidValueError` naming its number."""
    number = 0
    ended = False
    for number, raw in enumerate(source, start=1):
        if not raw.strip():
            continue
        if ended:
            raise InvalidValueError(f"{name}, line {number}: a line after the end line")
        try:
            line = json.loads(raw)
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
            f"{name} has no end line after line {number}: the export was cut off; what came "
            "before was imported, export again and import the whole file"
        )


def check_header(line: dict[str, Any], name: str = "the memory file") -> Header:
    if line.get("kind") != FORMAT:
        raise InvalidValueError(f"{name} is not a fastaiagent memory export (no header line)")
    version = line.get("version")
    if not isinstance(version, int) or version < 1:
        raise InvalidValueError(f"{name}: the header's version {version!r} is not a number")
    if version > VERSION:
        raise SchemaVersionError(
            f"{name} has format version {version}, but this fastaiagent reads versions up to "
            f"{VERSION}: upgrade the package (pip install -U fastaiagent) to import it"
        )
    dimension = line.get("dimension")
    return Header(line.get("user_id"), line.get("project_id"), dimension, version)


def fact_of(line: dict[str, Any]) -> Fact:
    try:
        values = {name: line[name] for name in _FACT_FIELDS}
    except KeyError as exc:
        raise InvalidValueError(f"line {line.get('_line')}: a fact without {exc.args[0]!r}") from None
    return Fact(**values)


def chunk_of(line: dict[str, Any]) -> tuple[str, Chunk]:
    try:
        vector = np.frombuffer(base64.b64decode(line["vector"], validate=True), dtype="<f4")
        chunk = Chunk(line["id"], line["text"], vector.tolist(), dict(line["metadata"]))
        return line["namespace"], chunk
    except (KeyError, ValueError, TypeError) as exc:
        raise InvalidValueError(f"line {line.get('_line')}: a bad recalled message ({exc})") from None


def window_of(line: dict[str, Any]) -> tuple[WindowKey, str]:
    try:
        return WindowKey(line["agent_id"], line["project_id"], line["user_id"]), line["state"]
    except KeyError as exc:
        raise InvalidValueError(f"line {line.get('_line')}: a window without {exc.args[0]!r}") from None


def item_of(line: dict[str, Any]) -> tuple[tuple[str, ...], str, str, float | None]:
    try:
        return tuple(line["namespace"]), line["key"], line["value"], line.get("expires_at")
    except KeyError as exc:
        raise InvalidValueError(f"line {line.get('_line')}: an item without {exc.args[0]!r}") from None
