"""The WindowStore contract: one stored conversation state per (agent, project, user).

A stored state is an opaque JSON text plus a *version*, a random token that
changes on every write. Writers compare-and-set on the version they loaded, so
two workers serving the same user never overwrite each other's turn; a random
token (not a counter) also means a window that expired or was deleted and then
started again can never be mistaken for the old one by a stale cache.

The protocol's verbs carry the argument checks, the versions and the sweeps
every shipped store shares; each backend (deriving from :class:`WindowFront`)
only reads and writes its own persistence.
"""

from __future__ import annotations

import secrets
from typing import ClassVar, NamedTuple, Protocol, cast, runtime_checkable

from fastaiagent._validate import positive_number
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.scoping import WILDCARD, expect

PURGE_EVERY = 500
"""Saves (per process) between sweeps of expired windows, where the backend
sweeps them (reads ignore them anyway)."""


class WindowKey(NamedTuple):
    """Whose window: ``agent_id`` ("" without one), ``project_id`` and ``user_id``."""

    agent_id: str
    project_id: str
    user_id: str


class StoredWindow(NamedTuple):
    """A load's answer: the stored version, and the state text (None when it equals
    the version the caller already holds, so nothing needed to travel)."""

    version: str
    state: str | None


def new_version() -> str:
    """A fresh version token (64 random bits, hex)."""
    return secrets.token_hex(8)


def check_key(key: WindowKey) -> WindowKey:
    """Reject a key a store could not file unambiguously."""
    expect(key, WindowKey, "expected a WindowKey")
    for name, part in zip(key._fields, key, strict=True):
        if not isinstance(part, str):
            raise InvalidTypeError(f"WindowKey.{name} must be a str, got {type(part).__name__}")
        if part == WILDCARD:
            raise InvalidValueError(f'WindowKey.{name} cannot be "*"')
    return key


def check_user(project_id: str, user_id: str) -> None:
    """Reject a (project, user) a store could not delete unambiguously."""
    check_key(WindowKey("", project_id, user_id))
    if not user_id:
        raise InvalidValueError("delete_user needs a user id (an empty one is nobody's)")


def check_ttl(ttl_seconds: float | None) -> float | None:
    """None (never expire) or a positive number of seconds."""
    return positive_number("window_ttl_seconds", ttl_seconds, allow_none=True)


@runtime_checkable
class WindowStore(Protocol):
    """Where shared windows live. Implementations must be safe to use from many
    threads and, after a fork, from the child (each process opens its own connections).
    ``load``, ``save``, ``delete`` and ``delete_user`` carry the bodies the shipped
    stores share (they derive from :class:`WindowFront`); another implementation
    writes its own."""

    def load(self, key: WindowKey, known_version: str | None = None) -> StoredWindow | None:
        """The stored window, or None when there is none (never written, expired or
        deleted). When its version equals ``known_version`` the state is not sent."""
        return cast(WindowFront, self).load_window(check_key(key), known_version)

    def save(
        self, key: WindowKey, state: str, expected_version: str | None, ttl_seconds: float | None
    ) -> str | None:
        """Write ``state`` if the stored version is still ``expected_version`` (None:
        only if nothing is stored). Returns the new version, or None on a conflict.
        The window expires ``ttl_seconds`` after this write (None: never)."""
        front, version = cast(WindowFront, self), new_version()
        if not front.save_window(check_key(key), state, expected_version, ttl_seconds, version):
            return None
        front.count_save()
        return version

    def delete(self, key: WindowKey) -> bool:
        """Delete one window; True when there was one."""
        return cast(WindowFront, self).delete_window(check_key(key))

    def delete_all(self, agent_id: str, project_id: str) -> int:
        """Delete every user's window of an agent and project; returns the count."""
        ...

    def delete_user(self, project_id: str, user_id: str) -> int:
        """Delete one user's windows of *every* agent in a project; returns the count.

        ``forget`` of a user calls it, so no agent keeps their messages,
        summary or block state. Deleting one agent's window is :meth:`delete`.
        """
        check_user(project_id, user_id)
        return cast(WindowFront, self).delete_user_windows(project_id, user_id)

    def close(self) -> None:
        """Release connections this store opened itself (shared ones stay open)."""
        ...


@runtime_checkable
class ListsWindows(Protocol):
    """A window store that can name its windows (the shipped ones can): what an
    export of a location, or of one user, reads."""

    def window_keys(self, project_id: str | None = None, user_id: str | None = None) -> list[WindowKey]:
        """The keys of the live windows (None: any project / user), sorted."""
        ...


@runtime_checkable
class HoldsWindows(Protocol):
    """A store capability: the store can keep shared conversation windows.

    ``Memory(window_store="shared")`` calls ``window_store()`` on the Memory's fact
    store; a user's own FactStore that implements it gets shared windows too.
    """

    def window_store(self) -> WindowStore:
        """A WindowStore on this store's own connections (same file, pool or client)."""
        ...


class WindowFront(WindowStore):
    """The base of the shipped window stores: :class:`WindowStore` checks every
    key, makes each save's new version and, where the backend sweeps expired
    windows itself (:attr:`purge_every` > 0), calls :meth:`purge_expired` every so
    many saves; a backend implements the hooks below and ``delete_all``."""

    purge_every: ClassVar[int] = 0
    """Saves between sweeps (0: the server expires windows itself, as Redis does)."""
    _saves = 0  # this process's saves since the last sweep

    def count_save(self) -> None:
        """Count one save; every :attr:`purge_every`, sweep expired windows."""
        if self.purge_every:
            self._saves += 1
            if self._saves >= self.purge_every:
                self._saves = 0
                self.purge_expired()

    def purge_expired(self) -> int:
        """Delete windows past their TTL now (reads already ignore them); returns the
        count: 0 here, where the server expires windows itself."""
        return 0

    def load_window(self, key: WindowKey, known_version: str | None) -> StoredWindow | None:
        """The backend's part of :meth:`load` (``key`` checked)."""
        raise NotImplementedError

    def save_window(
        self, key: WindowKey, state: str, expected_version: str | None, ttl_seconds: float | None, version: str
    ) -> bool:
        """The backend's part of :meth:`save`: compare-and-set ``state`` at the new
        ``version``; True when it was written. A retried write that already landed
        (the stored version is ``version``) is written again."""
        raise NotImplementedError

    def delete_window(self, key: WindowKey) -> bool:
        """The backend's part of :meth:`delete` (``key`` checked)."""
        raise NotImplementedError

    def delete_user_windows(self, project_id: str, user_id: str) -> int:
        """The backend's part of :meth:`delete_user` (the user checked)."""
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to release: the connections (file, pool or client) belong to the fact store."""
