"""The recall id of each message: unique per message, the same when a turn is replayed.

Two workers serving one user load the same window; an id carried in that
window (the "next" id a message announces for its successor) would be given
to both workers' next messages, and one would overwrite the other in the
store. So an announced id is only used by the block that made it, and a
message keeps the id (and the successor link) it was first given in this
process: a turn re-applied after a lost compare-and-set of the shared window
writes the same chunks again (an upsert), never a second copy.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any

REMEMBERED = 4096  # messages whose ids this process remembers, for replays of recent turns

_lock = threading.Lock()
_issued: OrderedDict[tuple[str, int], tuple[weakref.ref[Any], str, str]] = OrderedDict()


def issued(namespace: str, message: Any) -> tuple[str, str] | None:
    """(id, next id) given to this very message object in ``namespace``, if any."""
    key = (namespace, id(message))
    with _lock:
        entry = _issued.get(key)
    if entry is None or entry[0]() is not message:  # gone: its id() was reused
        return None
    return entry[1], entry[2]


def remember(namespace: str, message: Any, chunk_id: str, following: str) -> None:
    """Record the ids given to ``message`` (the oldest of :data:`REMEMBERED` go)."""
    try:
        ref = weakref.ref(message)
    except TypeError:  # not weakly referable: a replay embeds it again under a new id
        return
    with _lock:
        _issued[(namespace, id(message))] = (ref, chunk_id, following)
        while len(_issued) > REMEMBERED:
            _issued.popitem(last=False)


__all__ = ["REMEMBERED", "issued", "remember"]
