"""The durable fact record shared by every store."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

SCOPES = ("user", "project", "agent")
# Where a fact came from: one name per source, shown as it is everywhere (the
# prompt, the CLI, the Memory page), listed in docs/how-memory-works.md.
SOURCE_MANUAL = "manual"  # written directly (Memory.persist/update, store.add, the CLI, the page)
SOURCE_CONVERSATION = "learned"  # learned during a run: Memory(learn=), FactExtractionBlock(persist=True)
SOURCE_TRACES = "traces"  # mined from past runs' traces by `fastaiagent learn`
SOURCES = (SOURCE_MANUAL, SOURCE_CONVERSATION, SOURCE_TRACES)
"""The library's own source names. Another source (your own writes) is kept as given."""
RENAMED_SOURCES = {"learn": SOURCE_TRACES}
"""Older names of a source, read as today's: a fact stored as ``"learn"`` (by
``fastaiagent learn`` before the rename) reads as ``"traces"``."""
# Kept for callers of the old table: a source's words are its name.
SOURCE_WORDS = {source: source for source in SOURCES}
LEARNED_CONFIDENCE = 0.6
"""The confidence of what a Memory's learning (``learn=``) stores: a fact a user said,
rewritten by a model, stands below one written directly (1.0)."""

_FLAT = (str, int, float, bool, type(None))
_PARSED: dict[str, dict[str, Any]] = {}  # stored metadata text -> its flat value
_PARSED_MAX = 4096


def metadata_from_text(text: str | None) -> dict[str, Any]:
    """A fact's metadata from its stored JSON text, a new dict each call.

    Most facts of a store share one of a few metadata texts (the writing agent's
    id), and parsing JSON for every row of every turn's read cost more than the
    rest of the read; so flat objects are parsed once and copied after (a copy of
    a small dict is ~20x cheaper). Nested values are parsed each time: a shallow
    copy would share them between facts.
    """
    if not text or text == "{}":
        return {}
    parsed = _PARSED.get(text)
    if parsed is not None:
        return parsed.copy()
    value = json.loads(text)
    if _flat(value):
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()  # rare: that many distinct texts are not a shared few
        _PARSED[text] = value.copy()
    return value


def _flat(value: object) -> bool:
    """A JSON object whose values are all scalars: a shallow copy shares nothing."""
    return isinstance(value, dict) and all(isinstance(item, _FLAT) for item in value.values())


class UsualMetadata:
    """The metadata text most facts of a store carry (the writing agent's stamp), so
    the per-turn read can have SQL mark it instead of making a string of it per row
    (~15% of a 20-fact read). ``current`` is one ``(text, value)`` pair, replaced
    whole: a reader takes it once and uses both halves."""

    __slots__ = ("current",)

    def __init__(self) -> None:
        self.current: tuple[str, dict[str, Any]] = ("", {})

    def learn(self, text: str | None) -> None:
        """Take ``text`` as the usual metadata when it is a flat, non-empty object."""
        if not text or text == "{}" or text == self.current[0]:
            return
        value = metadata_from_text(text)
        if value and _flat(value):  # copied per fact: nothing nested to share
            self.current = (text, value)


@dataclass
class Fact:
    """One durable statement, filed under ``scope:scope_id`` within ``project_id``.

    ``id`` and ``created_at`` are set by the store. A fact is *active* while
    ``superseded_by`` is None; a superseded fact stays as history.

    A fact has two times, all in UNIX seconds (UTC). *Recorded*: ``created_at``
    (when the store learned it) and ``superseded_at`` (when a newer version
    replaced it). *Valid*: ``valid_from`` / ``valid_to``, when it holds in the
    world (None: open-ended); a fact whose ``valid_to`` has passed is
    *expired* and is left out of every read by default.
    """

    fact: str
    scope: str = "agent"
    scope_id: str = ""
    project_id: str = ""
    confidence: float = 1.0
    source: str = SOURCE_MANUAL
    source_trace_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    id: int | None = None
    created_at: float = 0.0
    superseded_by: int | None = None
    valid_from: float | None = None
    valid_to: float | None = None
    superseded_at: float | None = None

    def __post_init__(self) -> None:
        # A store (or export file) written before a source was renamed reads as today's name.
        if self.source in RENAMED_SOURCES:
            self.source = RENAMED_SOURCES[self.source]

    @property
    def active(self) -> bool:
        return self.superseded_by is None

    def valid_at(self, when: float) -> bool:
        """Whether the fact holds in the world at ``when`` (UNIX seconds)."""
        return (self.valid_from is None or self.valid_from <= when) and (
            self.valid_to is None or when < self.valid_to
        )

    def expired(self, now: float) -> bool:
        """Whether ``valid_to`` has passed at ``now``."""
        return self.valid_to is not None and self.valid_to <= now

    @property
    def subject(self) -> str:
        """``scope:scope_id``, as the Memory page shows it."""
        return f"{self.scope}:{self.scope_id}"

    @property
    def created_datetime(self) -> datetime:
        return datetime.fromtimestamp(self.created_at, tz=timezone.utc)

    @property
    def source_label(self) -> str:
        """``manual`` for direct writes, else the trace id or the source name."""
        if self.source_trace_id:
            return self.source_trace_id
        return self.source or SOURCE_MANUAL

    @property
    def source_words(self) -> str:
        """Where the fact came from, as the prompt, the CLI and the Memory page show
        it: its source name (``manual``, ``learned``, ``traces``; see
        :data:`SOURCES`), ``manual`` when unset. The run it came from, if any, is
        :attr:`source_trace_id`."""
        return self.source or SOURCE_MANUAL

    def with_metadata(self, metadata: dict[str, Any]) -> Fact:
        """A copy carrying ``metadata`` instead (the other fields shared as they are;
        a field-by-field copy, twice as fast as ``dataclasses.replace`` on a write)."""
        copy = object.__new__(Fact)
        copy.__dict__.update(self.__dict__)
        copy.metadata = metadata
        return copy

    def stamped(self) -> Fact:
        """A copy with ``created_at`` set to now when it was left unset."""
        if self.created_at:
            return self
        return Fact(**{**self.__dict__, "created_at": time.time(), "metadata": dict(self.metadata)})

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__, metadata=dict(self.metadata))
