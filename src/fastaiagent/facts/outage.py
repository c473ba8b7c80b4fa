"""Store outages cost one wait, not one per call.

When a Postgres or Redis server stops answering, the first call that finds
out pays the connection timeout; the server is then paused for everyone in
the process that uses it (every store object, window store and user): calls
made during the pause raise :class:`~fastaiagent.errors.StoreUnavailableError`
at once, naming the cause and when the next attempt is due. When the pause
ends, one call goes through as a probe: if it reaches the server the pause is
lifted, if not the pause doubles (up to :data:`MAX_PAUSE_SECONDS`). Agent
turns run without memory meanwhile (blocks render nothing, writes are
skipped), so an outage degrades memory, never the run.

The pause lengths are module settings, read at each failure::

    from fastaiagent.facts import outage
    outage.PAUSE_SECONDS = 2.0        # first pause after a failure (default 5 s)
    outage.MAX_PAUSE_SECONDS = 30.0   # longest pause (default 60 s)

:func:`reset` lifts every pause now (after fixing a server by hand, or in tests).
Only connection-level failures pause a server (refused, unreachable, timed out,
rejected credentials, lost connections); a failed statement does not.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from fastaiagent.errors import StoreUnavailableError
from fastaiagent.facts.locations import redacted_url

PAUSE_SECONDS = 5.0
MAX_PAUSE_SECONDS = 60.0

logger = logging.getLogger("fastaiagent.facts.outage")


class StoreHealth:
    """Whether one store server (``target``) may be called now.

    Shared by every store object of the process that talks to that server
    (see :func:`health`). Healthy, :meth:`check` and :meth:`succeeded` cost
    one attribute read.
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._down = False
        self._until = 0.0  # monotonic time the pause (or a probe's turn) ends
        self._pause = 0.0  # length of the current pause
        self._since = 0.0  # when the outage began
        self._cause = ""
        self._prober = 0  # the thread let through to try the server (0: none)

    def __repr__(self) -> str:
        state = f"paused ({self._cause})" if self._down else "healthy"
        return f"StoreHealth({self.target!r}, {state})"

    @property
    def cause(self) -> str:
        """Why the server is paused ("" when it is not)."""
        return self._cause if self._down else ""

    def remaining(self) -> float:
        """Seconds until the next call may try the server (0 when it may now)."""
        if not self._down:
            return 0.0
        return max(0.0, self._until - time.monotonic())

    def check(
        self, prefix: str = "", error: Callable[[str], Exception] = StoreUnavailableError
    ) -> None:
        """Return when a call may go to the server; raise ``error`` while it is
        paused (``prefix`` starts the message, e.g. ``"the fact store is unavailable: "``).

        The first call after a pause ends is let through as the probe (with
        whatever else its thread calls on the way); the pause is held for
        others until it reports (or for one more pause, should it never report).
        """
        if not self._down:
            return
        with self._lock:
            if not self._down:
                return
            now = time.monotonic()
            if now < self._until:
                if self._prober == threading.get_ident():
                    return
                raise error(
                    f"{prefix}{self.target} is paused after a failure ({self._cause}); "
                    f"calls to it fail at once until the next attempt in "
                    f"{self._until - now:.1f} s"
                )
            # This caller probes; the others wait for it (for one more pause at most).
            self._until, self._prober = now + self._pause, threading.get_ident()

    def failed(self, cause: str) -> None:
        """Record a connection-level failure: start the pause, or lengthen it
        when a probe failed. Calls already in flight when the pause began
        report too (as may a probe's, from another thread); they do not lengthen it."""
        with self._lock:
            now = time.monotonic()
            if not self._down:
                self._down, self._since, self._pause = True, now, PAUSE_SECONDS
                self._cause, self._until, self._prober = cause, now + self._pause, 0
                logger.warning(
                    "%s is unavailable (%s): memory runs without it; retrying in %.0f s",
                    self.target,
                    cause,
                    self._pause,
                )
                return
            self._cause = cause
            if self._prober != threading.get_ident():
                return  # a call that started before the pause: the pause stands
            self._prober = 0
            self._pause = min(max(self._pause * 2, PAUSE_SECONDS), MAX_PAUSE_SECONDS)
            self._until = now + self._pause
            logger.info(
                "%s is still unavailable (%s); retrying in %.0f s",
                self.target,
                cause,
                self._pause,
            )

    def succeeded(self) -> None:
        """Record that the server answered: lift the pause."""
        if not self._down:
            return
        with self._lock:
            if not self._down:
                return
            down_for = time.monotonic() - self._since
            self._down, self._cause, self._until, self._pause = False, "", 0.0, 0.0
            self._prober = 0
        logger.warning("%s is back after %.0f s", self.target, down_for)

    def _reset(self) -> None:
        self._down, self._cause, self._until, self._pause = False, "", 0.0, 0.0
        self._prober = 0


def server_name(kind: str, url: str) -> str:
    """How a server is named in messages and keyed here: ``"<kind> at <url>"``,
    the URL without its password."""
    return kind + " at " + redacted_url(url)


_registry: dict[str, StoreHealth] = {}
_registry_lock = threading.Lock()


def health(target: str) -> StoreHealth:
    """The shared :class:`StoreHealth` of ``target`` (a server's URL without its
    password); stores look theirs up once, when they are created."""
    found = _registry.get(target)
    if found is not None:
        return found
    with _registry_lock:
        return _registry.setdefault(target, StoreHealth(target))


def paused() -> dict[str, str]:
    """Every server paused now, with the cause (empty when all are healthy)."""
    return {target: h.cause for target, h in list(_registry.items()) if h.cause}


def reset() -> None:
    """Lift every pause now; the next call to each server tries it."""
    for item in list(_registry.values()):
        with item._lock:
            item._reset()


def _after_fork() -> None:
    # A lock held by another thread at fork time would never be released in
    # the child: give each its own, and let the child find out for itself.
    global _registry_lock
    _registry_lock = threading.Lock()
    for item in _registry.values():
        item._lock = threading.Lock()
        item._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


__all__ = [
    "MAX_PAUSE_SECONDS",
    "PAUSE_SECONDS",
    "StoreHealth",
    "health",
    "paused",
    "reset",
    "server_name",
]
