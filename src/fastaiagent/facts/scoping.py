"""The scoping rules of every fact store, in one place.

- user/project scope: an empty id reads nothing and refuses delete; ``"*"``
  reads or deletes every subject, on purpose.
- agent scope: an empty id reads every agent (shared truth is permissive)
  but is refused on delete, where it would wipe every agent by accident.
- ``"*"`` is never a valid id on write.
- ``project_id`` always matches exactly ("" is the default partition).

Fact text is compared normalised (case and spacing) everywhere, so the same
statement typed twice is one fact.

Size limits (each refused with an ``InvalidValueError`` that names it) are
module settings read at every call; assign a new value to change one::

    from fastaiagent.facts import scoping
    scoping.MAX_METADATA_BYTES = 64_000
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeVar

from fastaiagent._io import json_value_too_deep

# The id rule is one for every layer (the faces check ids with it too); kept importable here.
from fastaiagent._validate import MAX_ID_CHARS, fraction, id_problem, integer, number, text_problem
from fastaiagent.errors import FactNotFoundError, InvalidTypeError, InvalidValueError
from fastaiagent.facts.fact import SCOPES, Fact

WILDCARD = "*"
MAX_FACT_CHARS = 10_000
"""Longest fact text, in characters (facts are injected into prompts)."""
MAX_METADATA_BYTES = 16_384
"""Largest ``metadata`` of a fact, as JSON (it comes back with every read of the fact)."""
MAX_MESSAGE_CHARS = 65_536
"""Longest message a shared window stores (the window is written on every turn)."""
MAX_RECALL_CHARS = 16_384
"""Longest text one recalled message stores; a longer message is recalled by its
start (embedders read a few hundred tokens; the rest would only fill the store)."""
_K = TypeVar("_K")


def _too_big(what: str, size: str, setting: str) -> InvalidValueError:
    limit = globals()[setting]
    return InvalidValueError(
        f"{what} is {size}; the limit is {limit:,}: keep it smaller, or raise the limit "
        f"with fastaiagent.facts.scoping.{setting} = <new value>"
    )
def normalize_text(text: str) -> str:
    """The comparison key of a fact: case-folded, spacing collapsed."""
    # str.split() splits on runs of what re's \s matches (str.isspace) and drops the
    # ends: the same key as re.sub(r"\s+", " ", text).strip(), at half the cost.
    return " ".join(text.split()).casefold()


def check_scope(scope: str) -> None:
    if scope not in SCOPES:
        raise InvalidValueError(f"unknown scope {scope!r}; expected one of {SCOPES}")


def _check_str(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


def expect(value: object, kind: type[_K], what: str) -> _K:
    """``value`` when it is a ``kind``; else InvalidTypeError ``"<what>, got <type>"``
    (the checks of the stores' records: facts, item writes, window keys)."""
    if not isinstance(value, kind):
        raise InvalidTypeError(f"{what}, got {type(value).__name__}")
    return value


def validate_for_write(fact: Fact) -> Fact:
    """Check a fact before it is stored; returns it with ``created_at`` stamped."""
    expect(fact, Fact, "expected a Fact")
    check_scope(fact.scope)
    text = _check_str("fact", fact.fact)
    _check_str("scope_id", fact.scope_id)
    _check_str("project_id", fact.project_id)
    if not text.strip():  # what normalize_text leaves empty (\s is str.isspace)
        raise InvalidValueError("fact text is empty")
    if len(text) > MAX_FACT_CHARS:
        raise _too_big("fact text", f"{len(text):,} characters", "MAX_FACT_CHARS")
    problem = text_problem(text)
    if problem is not None:
        raise InvalidValueError(f"fact {problem}")
    for name, value in (("scope_id", fact.scope_id), ("project_id", fact.project_id)):
        problem = id_problem(value)
        if problem is not None:
            raise InvalidValueError(f"{name} {problem}")
    if fact.scope in ("user", "project") and not fact.scope_id:
        raise InvalidValueError(f"a {fact.scope}-scope fact needs a non-empty scope_id")
    fraction("confidence", fact.confidence)
    if not isinstance(fact.metadata, dict):
        raise InvalidTypeError("metadata must be a dict")
    if not _small_text_map(fact.metadata):
        _check_metadata_json(fact.metadata)
    check_validity(fact.valid_from, fact.valid_to)
    return fact.stamped()


def _small_text_map(metadata: dict[Any, Any]) -> bool:
    """Metadata of text keys and values whose JSON, at worst 6 characters a
    character ("\\uXXXX") and 6 more a pair, is under the limit: no need to encode
    it to know (an agent's ``{"agent_id": ...}`` stamp on every write)."""
    if len(metadata) > 8:
        return False
    size = 2
    for key, value in metadata.items():
        if type(key) is not str or type(value) is not str:
            return False
        size += 6 * (len(key) + len(value) + 1)
    return size <= MAX_METADATA_BYTES


def _check_metadata_json(metadata: dict[Any, Any]) -> None:
    """Raise unless ``metadata`` encodes as JSON within :data:`MAX_METADATA_BYTES`."""
    if json_value_too_deep(metadata):
        raise InvalidTypeError("metadata must be JSON-serialisable: nested too deeply")
    try:
        size = len(json.dumps(metadata)) if metadata else 0
    except (TypeError, ValueError) as exc:
        raise InvalidTypeError(f"metadata must be JSON-serialisable: {exc}") from None
    if size > MAX_METADATA_BYTES:
        raise _too_big("metadata", f"{size:,} bytes of JSON", "MAX_METADATA_BYTES")


def check_validity(valid_from: object, valid_to: object) -> None:
    """``valid_from`` / ``valid_to`` of a stored fact: None or UNIX seconds (the
    verbs turn datetimes into seconds), and the end after the start."""
    start = number("valid_from", valid_from, allow_none=True)
    end = number("valid_to", valid_to, allow_none=True)
    if start is not None and end is not None and end <= start:
        raise InvalidValueError(
            f"valid_to ({end}) must be after valid_from ({start}): a fact holds from "
            "valid_from up to, not including, valid_to"
        )


def check_message_size(role: str, content: object) -> None:
    """Refuse a message longer than :data:`MAX_MESSAGE_CHARS` before a shared
    window stores it (``content`` that is not text is left to its own checks)."""
    if isinstance(content, str) and len(content) > MAX_MESSAGE_CHARS:
        raise _too_big(f"the {role} message", f"{len(content):,} characters", "MAX_MESSAGE_CHARS")


@dataclass(frozen=True)
class Selector:
    """Which subjects a read or delete touches. ``scope_id=None`` means all of them."""

    scope: str
    scope_id: str | None
    project_id: str


def _check_id(name: str, value: object) -> None:
    """The id rule (:func:`~fastaiagent._validate.id_problem`) on a read or a delete
    of a store, so a bad id is the library's InvalidValueError, never a driver's
    UnicodeEncodeError or an outage. The usual id (short ASCII text, no NUL, not
    starting with a space) passes in a few tens of ns: this runs on every read."""
    text = _check_str(name, value)
    if text.isascii() and "\x00" not in text and len(text) <= MAX_ID_CHARS and not text[:1].isspace():
        return
    if text == WILDCARD:
        return
    problem = id_problem(text)
    if problem is not None:
        raise InvalidValueError(f"{name} {problem}")


def read_selector(scope: str, scope_id: str, project_id: str = "") -> Selector | None:
    """The subjects a read covers, or None when it must read nothing."""
    check_scope(scope)
    _check_id("scope_id", scope_id)
    _check_id("project_id", project_id)
    if scope_id == WILDCARD:
        return Selector(scope, None, project_id)
    if not scope_id:
        return Selector(scope, None, project_id) if scope == "agent" else None
    return Selector(scope, scope_id, project_id)


def page_selector(
    scope: str, scope_id: str, project_id: str, limit: int | None, offset: int
) -> Selector | None:
    """The subjects one page of ``list_active`` covers, with the page checked;
    None when the read returns nothing (an empty user id, or ``limit=0``)."""
    check_limit(limit)
    integer("offset", offset, minimum=0)
    selector = read_selector(scope, scope_id, project_id)
    return None if selector is None or limit == 0 else selector


def delete_selector(scope: str, scope_id: str, project_id: str = "") -> Selector:
    """The subjects a delete covers; an empty id is refused at every scope."""
    check_scope(scope)
    _check_id("scope_id", scope_id)
    _check_id("project_id", project_id)
    if not scope_id:
        raise InvalidValueError(
            f"refusing to delete {scope}-scope facts with an empty id; "
            'pass scope_id="*" to delete every subject on purpose'
        )
    return Selector(scope, None if scope_id == WILDCARD else scope_id, project_id)


def check_fact_id(value: object) -> int:
    """A fact id must be a plain int (not a bool, not a numeric string)."""
    return integer("fact id", value)


def check_fact_text(value: object) -> str:
    """The ``fact=`` filter of delete (and a text looked up): a str every backend can
    compare (no NUL, no lone surrogate), normalised."""
    text = _check_str("fact", value)
    if not text.isascii() or "\x00" in text:
        problem = text_problem(text)
        if problem is not None:
            raise InvalidValueError(f"fact {problem}")
    return normalize_text(text)


def check_limit(limit: int | None) -> None:
    """None (no limit) or an int >= 0."""
    if limit is not None:
        integer("limit", limit, minimum=0)


def not_in_subject(fact_id: object, scope: str, scope_id: str, project_id: str) -> FactNotFoundError:
    """The refusal of a fact id that is not the caller's subject's: the same words
    whether the id is another subject's or nobody's, naming the caller's subject
    only (an error that named the other subject would let ids be walked to list
    users)."""
    where = f"{scope}:{scope_id}" + (f" (project {project_id!r})" if project_id else "")
    return FactNotFoundError(
        f"no fact #{fact_id} in {where}: a fact can only replace one of its own subject "
        "(same scope, id and project)"
    )


def check_supersede(old: Fact | None, new: Fact | None, old_id: int, new_id: int) -> None:
    """The rules of ``supersede``: both exist, same subject, new active, no self or
    cycle. An ``old`` of another subject is refused as if it did not exist, in the
    words of ``new``'s subject (see :func:`not_in_subject`)."""
    if old_id == new_id:
        raise InvalidValueError(f"fact #{old_id} cannot supersede itself")
    if new is None:
        raise FactNotFoundError(f"no fact #{new_id}")
    if old is None or (old.scope, old.scope_id, old.project_id) != (new.scope, new.scope_id, new.project_id):
        raise not_in_subject(old_id, new.scope, new.scope_id, new.project_id)
    if new.superseded_by is not None:
        raise InvalidValueError(f"fact #{new_id} is itself superseded and cannot replace another")
    if old.superseded_by is not None and old.superseded_by != new_id:
        raise InvalidValueError(f"fact #{old_id} is already superseded by #{old.superseded_by}")
