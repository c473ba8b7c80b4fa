"""Time in the fact stores: the clock, and the checks of the moments a call names.

Every time a store reads or writes is UNIX seconds (UTC). The stores take the
moment of a read (``now=``, ``at=``) from their caller, so a Memory with an
injected clock (``Memory(clock=...)``) decides what "now" is for every read
and write it makes; left out, it is the current time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from fastaiagent._validate import integer, moment, number
from fastaiagent.errors import InvalidTypeError

Clock = Callable[[], "float | datetime"]
"""A clock: called with no arguments, returns UNIX seconds or a datetime."""


def moment_or_now(value: object) -> float:
    """``value`` (UNIX seconds or a datetime) as seconds; None is the current time."""
    if value is None:
        return time.time()
    result = moment("time", value)
    assert result is not None
    return result


def read_clock(clock: Clock) -> float:
    """The clock's current time in UNIX seconds."""
    return moment_or_now(clock())


def check_clock(clock: object) -> None:
    """None (the system clock) or a callable; anything else is a TypeError."""
    if clock is not None and not callable(clock):
        raise InvalidTypeError(f"clock must be a callable returning the time, got {type(clock).__name__}")


def history_cutoff(
    before: object, project_id: object, limit: object
) -> tuple[float, str | None, int]:
    """The checked arguments of ``prune_history``."""
    cutoff = number("before", before)
    assert cutoff is not None
    if project_id is not None and not isinstance(project_id, str):
        raise InvalidTypeError(f"project_id must be a str or None, got {type(project_id).__name__}")
    return cutoff, project_id, integer("limit", limit, minimum=1)
