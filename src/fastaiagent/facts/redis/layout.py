"""How the Redis stores write their data: key parts, sorted-set members, fact rows.

Key parts are percent-escaped (``%`` and ``:``), so an id that contains ``:``
can never collide with another subject. Sorted-set members are ids
zero-padded to :data:`ID_WIDTH` digits, so members order as ids do. A fact's
row is one JSON array of :data:`ROW_FIELDS` (three more fields when it has a
validity), which the read path turns into a ``Fact`` in one positional call.
The Lua scripts (``lua.py``) write the same formats on the server.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from fastaiagent.errors import SchemaVersionError
from fastaiagent.facts.fact import RENAMED_SOURCES, Fact, current_source

# A row lists these Fact fields in the dataclass's own order, so building a
# Fact from a row is one positional call (``superseded_by`` is None: rows are
# only read for active facts). A fact with a validity has three more:
# superseded_by (null), valid_from, valid_to.
ROW_FIELDS = (
    "fact",
    "scope",
    "scope_id",
    "project_id",
    "confidence",
    "source",
    "source_trace_id",
    "metadata",
    "id",
    "created_at",
)
if tuple(f.name for f in dataclasses.fields(Fact))[: len(ROW_FIELDS)] != ROW_FIELDS:
    raise ImportError("Fact's fields changed: update ROW_FIELDS in fastaiagent.facts.redis.layout")
ROW_LEN = len(ROW_FIELDS)
SOURCE_AT = ROW_FIELDS.index("source")
ID_WIDTH = 20  # digits of a sorted-set member; the Lua scripts hard-code it too


def escape_part(part: str, *, braces: bool = False) -> str:
    """Escape one key part: ``%`` and ``:`` are percent-encoded, nothing else changes.
    ``braces`` (the cluster layout): ``{`` and ``}`` too, so no id can end or start
    a hash tag (a single server's keys keep them, as they always did)."""
    escaped = part.replace("%", "%25").replace(":", "%3A")
    return escaped.replace("{", "%7B").replace("}", "%7D") if braces else escaped


def unescape_part(part: str) -> str:
    """The inverse of :func:`escape_part` (either form)."""
    return part.replace("%3A", ":").replace("%7B", "{").replace("%7D", "}").replace("%25", "%")


def glob_escape(pattern: str) -> str:
    """Escape SCAN MATCH metacharacters, so a key prefix matches only itself."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in pattern)


def recorded_layout(client: Any, key: str, known: str, what: str, *, plural: bool = False) -> int:
    """The layout version recorded at ``key`` (0: none). A version newer than
    ``known`` (or not a number) was written by a newer fastaiagent: raise
    :class:`~fastaiagent.errors.SchemaVersionError` naming ``what`` (``plural``:
    ``what`` names several things, e.g. "the Redis items under 'p'")."""
    found = client.get(key)
    if found is None:
        return 0
    if not found.isdigit() or int(found) > int(known):
        have, they, them = ("have", "they were", "them") if plural else ("has", "it was", "it")
        raise SchemaVersionError(
            f"{what} {have} layout {found!r}, but this fastaiagent knows layouts up to "
            f"{known}: {they} written by a newer fastaiagent. Upgrade the package "
            f"(pip install -U fastaiagent) in every process that opens {them}."
        )
    return int(found)


def sorted_member(fact_id: int) -> str:
    """A fact id as a sorted-set member: zero-padded, so members sort as ids do."""
    return str(fact_id).zfill(ID_WIDTH)


def text_digest(key: str) -> str:
    """The last part of a content key: a hash of the normalised text."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def parse_fact(fact_id: int, raw: dict[str, str]) -> Fact:
    """A fact from its hash's fields (a fact written without a row, or any history)."""
    superseded = raw.get("superseded_by") or ""
    return Fact(
        id=fact_id,
        fact=raw.get("fact", ""),
        scope=raw.get("scope", "agent"),
        scope_id=raw.get("scope_id", ""),
        project_id=raw.get("project_id", ""),
        confidence=float(raw.get("confidence") or 1.0),
        source=current_source(raw.get("source") or "manual"),
        source_trace_id=raw.get("source_trace_id") or None,
        created_at=float(raw.get("created_at") or 0.0),
        superseded_by=int(superseded) if superseded else None,
        metadata=json.loads(raw["metadata"]) if raw.get("metadata") else {},
        valid_from=_seconds(raw.get("valid_from")),
        valid_to=_seconds(raw.get("valid_to")),
        superseded_at=_seconds(raw.get("superseded_at")),
    )


def _seconds(value: str | None) -> float | None:
    return float(value) if value else None


def stored_time(value: float | None) -> str:
    """A time as a hash field ("" for none)."""
    return "" if value is None else repr(float(value))


def row_parts(fact: Fact) -> tuple[str, str]:
    """The fact's row (see ``ROW_FIELDS``) around its id, which a script fills in:
    ``head + "," + id + "," + tail`` is exactly :func:`fact_row`'s JSON."""
    head = json.dumps(
        [
            fact.fact,
            fact.scope,
            fact.scope_id,
            fact.project_id,
            float(fact.confidence),
            fact.source,
            fact.source_trace_id or None,
            fact.metadata,
        ],
        separators=(",", ":"),
    )
    times: list[float | None] = [float(fact.created_at)]
    if fact.valid_from is not None or fact.valid_to is not None:
        times += [None, fact.valid_from, fact.valid_to]
    return head[:-1], json.dumps(times, separators=(",", ":"))[1:]


def parse_rows(entries: list[str]) -> list[Fact]:
    """The facts of a subject's row entries (no marker among them), in one JSON parse."""
    return facts_of_rows("[" + ",".join([e[ID_WIDTH:] for e in entries]) + "]")


def facts_of_rows(text: str) -> list[Fact]:
    """The facts of a JSON list of rows; an old source name (rare: the text is
    searched once, not each row) reads as today's."""
    rows = json.loads(text)
    if any(f'"{old}"' in text for old in RENAMED_SOURCES):
        for row in rows:
            if len(row) > SOURCE_AT:
                row[SOURCE_AT] = current_source(row[SOURCE_AT])
    return [Fact(*row) for row in rows]


def fact_of_row(row: list[Any]) -> Fact:
    """The fact of one parsed row, an old source name read as today's."""
    row[SOURCE_AT] = current_source(row[SOURCE_AT])
    return Fact(*row)


def row_facts(entries: list[str], now: float) -> list[Fact]:
    """Facts of a subject's row entries valid at ``now`` (no marker among them)."""
    facts = parse_rows(entries)
    if any(f.valid_from is not None and f.valid_from > now for f in facts):
        facts = [f for f in facts if f.valid_from is None or f.valid_from <= now]
    return facts


def fact_row(fact_id: int, fact: Fact) -> str:
    """The fact as one JSON array of its ``ROW_FIELDS`` (the read path's format)."""
    head, tail = row_parts(fact)
    return f"{head},{fact_id},{tail}"
