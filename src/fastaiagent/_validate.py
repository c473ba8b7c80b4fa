"""One set of rules for checking arguments at the boundary.

Every public constructor and verb checks its arguments with these helpers, so
the same mistake gets the same message everywhere: a wrong type raises
:class:`~fastaiagent.errors.InvalidTypeError` (a ``TypeError``), a value out of
range :class:`~fastaiagent.errors.InvalidValueError` (a ``ValueError``). ``bool``
is never accepted as a number (``True`` is an ``int`` in Python, never what a
caller meant). Each helper returns the value, normalised, so callers write
``self.limit = positive_int("limit", limit)``.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

from fastaiagent.errors import InvalidTypeError, InvalidValueError

WILDCARD = "*"


def _got(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:120]


def integer(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """An ``int`` (not a bool, not a str) within ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{name} must be an int, got {_got(value)}")
    if minimum is not None and value < minimum:
        raise InvalidValueError(f"{name} must be >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidValueError(f"{name} must be <= {maximum}, got {value!r}")
    return value


def positive_int(name: str, value: Any, *, allow_none: bool = False) -> int | None:
    """An int >= 1 (or None when ``allow_none``)."""
    if value is None and allow_none:
        return None
    if value is None:
        raise InvalidTypeError(f"{name} must be a positive int, got None")
    return integer(name, value, minimum=1)


def number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
    allow_none: bool = False,
) -> float | None:
    """A finite int or float (not a bool, not a str) within the bounds, as a float."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"{name} must be a number, got {_got(value)}")
    if not math.isfinite(value):
        raise InvalidValueError(f"{name} must be a finite number, got {value!r}")
    if minimum is not None and (value <= minimum if exclusive_minimum else value < minimum):
        bound = f"> {minimum}" if exclusive_minimum else f">= {minimum}"
        raise InvalidValueError(f"{name} must be {bound}, got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidValueError(f"{name} must be <= {maximum}, got {value!r}")
    return float(value)


def positive_number(name: str, value: Any, *, allow_none: bool = False) -> float | None:
    """A finite number > 0 (or None when ``allow_none``): timeouts, TTLs, intervals."""
    return number(name, value, minimum=0, exclusive_minimum=True, allow_none=allow_none)


def fraction(name: str, value: Any) -> float:
    """A number in [0, 1]: confidences and weights."""
    result = number(name, value, minimum=0.0, maximum=1.0)
    assert result is not None
    return result


def moment(name: str, value: Any, *, allow_none: bool = False) -> float | None:
    """A point in time as UNIX seconds: a ``datetime`` (a naive one is read as UTC)
    or a finite number of seconds; None when ``allow_none``."""
    if value is None and allow_none:
        return None
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
        return aware.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"{name} must be a datetime or UNIX seconds, got {_got(value)}")
    return number(name, value)


def duration(name: str, value: Any, *, allow_none: bool = False) -> float | None:
    """A length of time > 0 in seconds: a ``timedelta`` or a number of seconds."""
    if value is None and allow_none:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(f"{name} must be a timedelta or seconds, got {_got(value)}")
    return positive_number(name, value)


def boolean(name: str, value: Any) -> bool:
    """Exactly True or False (not 0, 1 or "yes")."""
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be True or False, got {_got(value)}")
    return value


def text(name: str, value: Any, *, allow_empty: bool = False) -> str:
    """A str; blank only when ``allow_empty``."""
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be a str, got {_got(value)}")
    if not allow_empty and not value.strip():
        raise InvalidValueError(f"{name} cannot be empty")
    return value


MAX_ID_CHARS = 512  # ids are keys in every backend's indexes; keep them bounded


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text by every backend (a NUL character, a
    lone surrogate), or None when it can."""
    if "\x00" in value:
        return "cannot contain NUL characters (\\x00): remove them"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"is not valid Unicode text ({exc.reason} at position {exc.start}): pass text "
            "decoded from its bytes (e.g. data.decode('utf-8'))"
        )
    return None


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id (a user, agent, project or thread id), or None
    when it can: the ONE rule every door applies (the verbs, resolver results,
    ``add_history``, ``export_user``, the CLI, the Memory page, MCP, the plane, the
    adapters). Refused: NUL, a lone surrogate, only whitespace, over
    :data:`MAX_ID_CHARS` characters, the ``"*"`` wildcard. ``""`` passes here: it
    means "no id", which each caller allows or not."""
    problem = text_problem(value)
    if problem is not None:
        return problem
    if len(value) > MAX_ID_CHARS:
        return (
            f"is {len(value)} characters; the limit is {MAX_ID_CHARS}: use a shorter id "
            "(e.g. a hash of the long one)"
        )
    if value and not value.strip():
        return "is only whitespace: give a real id, or leave it out"
    if value == WILDCARD:
        return 'is "*": "*" is a read/delete wildcard and cannot be written as an id'
    return None


def identifier(
    name: str, value: Any, *, allow_wildcard: bool = False, allow_empty: bool = False
) -> str:
    """An id (see :func:`id_problem`): a str, ``"*"`` only when ``allow_wildcard``
    (a read or a delete of every subject), ``""`` only when ``allow_empty``."""
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be a str, got {_got(value)}")
    if value == WILDCARD and allow_wildcard:
        return value
    if not value:
        if allow_empty:
            return value
        raise InvalidValueError(f"{name} cannot be empty; leave it out (None) instead")
    problem = id_problem(value)
    if problem is not None:
        raise InvalidValueError(f"{name} {problem}")
    return value


def optional_id(name: str, value: Any) -> str | None:
    """An id that may be left out: None, or an id by :func:`id_problem` (not blank,
    not ``"*"``)."""
    if value is None:
        return None
    if isinstance(value, str) and value == WILDCARD:
        raise InvalidValueError(f'{name} cannot be "*" (the wildcard is for reads and deletes)')
    return identifier(name, value)


def port(name: str, value: Any) -> int:
    """A TCP port: an int in 0..65535 (0 asks the OS for a free one)."""
    return integer(name, value, minimum=0, maximum=65535)


def one_of(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """One of a fixed set of strings."""
    if value not in choices:
        raise InvalidValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return str(value)
