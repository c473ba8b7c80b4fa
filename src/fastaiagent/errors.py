"""Every error this library raises on purpose, under one base: :class:`FastAIAgentError`.

Each class also derives from the built-in exception a caller would expect
(``ValueError`` for a bad value, ``ConnectionError`` for an outage, ...), so
``except ValueError`` keeps working while ``except FastAIAgentError`` catches
everything the library raises deliberately. Messages name the fix.
"""

from __future__ import annotations


class FastAIAgentError(Exception):
    """Base class of every error fastaiagent raises on purpose."""


class InvalidValueError(FastAIAgentError, ValueError):
    """An argument or setting has a value the library cannot use."""


class InvalidTypeError(FastAIAgentError, TypeError):
    """An argument or setting has the wrong type."""


class NotFoundError(InvalidValueError, LookupError):
    """What a call names (a fact, a file, a folder) does not exist."""


class FactNotFoundError(NotFoundError, KeyError):
    """No fact has the given id (a ``KeyError`` too, as a store's ``update`` and
    ``supersede`` always raised for an unknown id)."""

    def __str__(self) -> str:  # the message as written, not quoted as KeyError's is
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class MissingFileError(FastAIAgentError, FileNotFoundError):
    """A file or directory the call reads does not exist (a saved memory, a model)."""


class MissingExtraError(FastAIAgentError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class UnsupportedTierError(InvalidValueError, NotImplementedError):
    """The session tier is the conversation window: it has no durable store to
    persist to, retrieve from or forget from."""


class UsageError(FastAIAgentError, RuntimeError):
    """The call is valid in general but not on this object or in this state."""


class PolicyError(FastAIAgentError, PermissionError):
    """A guard rail refused the operation (for example a write to a shared scope)."""


class StoreUnavailableError(FastAIAgentError, ConnectionError):
    """The fact or window store could not be reached or could not take the call now:
    refused, unreachable or timed out, the wrong protocol at the address, a lost
    connection, a full disk, a lock held too long. The message names the file or
    URL (password masked) and the fix; the driver's error is the ``__cause__``."""


class StoreConfigError(FastAIAgentError, RuntimeError):
    """The store cannot be used as configured: the location or the credentials are
    wrong (a Redis DB index out of range, rejected credentials, a missing database
    or role, no permission on the file or table, something other than Redis at a
    ``redis://`` address, a value the driver refuses). The message names the
    location and what to change. Deliberately not a
    :class:`StoreUnavailableError`: waiting will not fix it, so it is never
    retried in the background and agent runs raise it instead of answering
    without memory (see :func:`is_configuration_error`)."""


class UnreplicatedWriteWarning(FastAIAgentError, UserWarning):
    """A Redis Cluster write reached the primary of its slot, and is stored, but fewer
    replicas than it waits for (``?wait_replicas=``) acknowledged it in time: a
    failover of that primary now could lose it. The call returned its result: do
    not repeat it (the write is there; a repeat would write twice). To make such
    writes raise instead: ``warnings.simplefilter("error", UnreplicatedWriteWarning)``
    (the write is stored all the same)."""


class StoreCorruptError(FastAIAgentError, RuntimeError):
    """The store's data is damaged: a SQLite file that is not a database or whose
    pages are malformed, a table dropped or changed outside fastaiagent, Redis keys
    of the wrong type in the store's namespace, a Postgres page that fails its
    checks. The message names the file or URL and how to recover (a backup, or
    moving the file aside); the driver's error is the ``__cause__``."""


class ConflictError(FastAIAgentError, RuntimeError):
    """Concurrent writers kept changing the same data; the operation was not applied."""


class MemoryIsolationError(FastAIAgentError, RuntimeError):
    """A block that writes to an external store cannot be copied in isolation."""


class SchemaVersionError(FastAIAgentError, RuntimeError):
    """A store was written by a newer fastaiagent than this one: upgrade the package."""


def is_configuration_error(exc: BaseException) -> bool:
    """True for an error that retrying will not fix and that memory must not run
    without: a store configured wrong (:class:`StoreConfigError`), one written by a
    newer fastaiagent (:class:`SchemaVersionError`), a missing extra
    (:class:`MissingExtraError`). Where an outage degrades memory (a block's render,
    a shared window's load), these are raised to the caller instead."""
    return isinstance(exc, (StoreConfigError, SchemaVersionError, MissingExtraError))


__all__ = [
    "ConflictError",
    "FactNotFoundError",
    "FastAIAgentError",
    "InvalidTypeError",
    "InvalidValueError",
    "MemoryIsolationError",
    "MissingExtraError",
    "MissingFileError",
    "NotFoundError",
    "PolicyError",
    "SchemaVersionError",
    "StoreConfigError",
    "StoreCorruptError",
    "StoreUnavailableError",
    "UnreplicatedWriteWarning",
    "UnsupportedTierError",
    "UsageError",
    "is_configuration_error",
]
