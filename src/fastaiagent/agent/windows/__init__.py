"""Shared conversation windows: any worker can serve any user's next turn.

``Memory(..., window_store="shared")`` keeps each user's window, summary and block
state in the fact store's database (SQLite file, Postgres or Redis);
``window_store="redis://..."`` (or a ``postgres://`` / ``sqlite:///`` URL, or a
:class:`WindowStore`) puts them elsewhere. See ``docs/production.md``.
"""

from __future__ import annotations

from typing import Any

from fastaiagent.agent.memory_config import DEFAULT_WINDOW_TTL
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.factory import POSTGRES_SCHEMES, REDIS_SCHEMES, make_fact_store
from fastaiagent.facts.store import FactStore
from fastaiagent.facts.windows import (
    StoredWindow,
    WindowKey,
    WindowStore,
    check_ttl,
    new_version,
)

SHARED = "shared"


def window_store_for(fact_store: Any) -> WindowStore:
    """The WindowStore that lives next to a fact store, on its connections.

    Any store offers shared windows by implementing the
    :class:`~fastaiagent.facts.windows.HoldsWindows` capability (a
    ``window_store()`` method); the shipped SQLite, Postgres and Redis stores do.
    """
    offer = getattr(fact_store, "window_store", None)
    if callable(offer):
        windows = offer()
        if isinstance(windows, WindowStore):
            return windows
    kind = type(fact_store).__name__
    raise InvalidValueError(
        f'window_store="shared" keeps windows in the fact store, but {kind} cannot hold them: '
        "give it a window_store() method (see docs/backends.md, capabilities), use "
        'location="sqlite"/"postgres://..."/"redis://...", or pass window_store="redis://..." '
        "(or a WindowStore instance)"
    )


def make_window_store(window_store: Any, fact_store: FactStore, location: Any) -> WindowStore | None:
    """Turn ``Memory(window_store=...)`` into a WindowStore (None: in-process windows).

    A URL equal to the string ``location`` reuses the fact store's connections.
    """
    if window_store is None:
        return None
    if window_store == SHARED:
        return window_store_for(fact_store)
    if isinstance(window_store, str):
        if not window_store.startswith((*POSTGRES_SCHEMES, *REDIS_SCHEMES, "sqlite:///")):
            raise InvalidValueError(
                f'window_store={window_store!r} is not supported: use None, "shared", '
                '"redis://...", "postgres://...", "sqlite:///path.db" or a WindowStore'
            )
        same = isinstance(location, str) and window_store == location
        return window_store_for(fact_store if same else make_fact_store(window_store))
    if isinstance(window_store, WindowStore):
        return window_store
    raise InvalidTypeError(
        f'window_store= must be None, "shared", a URL or a WindowStore, got {type(window_store).__name__}'
    )


__all__ = [
    "DEFAULT_WINDOW_TTL",
    "StoredWindow",
    "WindowKey",
    "WindowStore",
    "check_ttl",
    "make_window_store",
    "new_version",
    "window_store_for",
]
