"""The ItemStore contract: namespaced key/value items in a fact store's database.

Framework adapters (LangGraph's store and checkpointer, the OpenAI Agents SDK
session; see :mod:`fastaiagent.integrations`) keep their state here, next to
the facts and on the same connections. An item is an opaque text ``value``
filed under a *namespace* (a tuple of strings) and a ``key``. Within a
namespace, items come back in key order, so a caller that wants time order
picks keys that sort by time (LangGraph's checkpoint ids do; the session
makes them so).

Namespaces are stored as one text, each part followed by ``SEPARATOR``, so a
prefix of parts is a prefix of the text (a range scan on one index) and
``("a",)`` never matches ``("ab",)``. A part therefore cannot contain the
separator. Items may expire: ``ttl_seconds`` after their last write (or read,
when the reader asks to refresh); expired items are never returned and are
swept now and then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from fastaiagent._validate import integer, positive_number
from fastaiagent.errors import InvalidTypeError, InvalidValueError

Namespace = tuple[str, ...]

SEPARATOR = "\x1f"  # ASCII unit separator: never in a label a person or framework writes
END = "\x20"  # the character after SEPARATOR: ``prefix <= ns < prefix[:-1] + END``


class StoredItem(NamedTuple):
    """One item as stored. Times are Unix seconds; ``expires_at`` and
    ``ttl_seconds`` are None for an item that never expires."""

    namespace: Namespace
    key: str
    value: str
    created_at: float
    updated_at: float
    expires_at: float | None
    ttl_seconds: float | None


class ItemWrite(NamedTuple):
    """One write of a batch: ``value=None`` deletes the item; ``if_absent`` writes
    only when no live item has that key (the first writer wins)."""

    namespace: Namespace
    key: str
    value: str | None
    ttl_seconds: float | None = None
    if_absent: bool = False


def encode_namespace(namespace: Namespace) -> str:
    """The stored text of a namespace (checked: a tuple of str without the separator)."""
    if not isinstance(namespace, tuple):
        raise InvalidTypeError(f"a namespace is a tuple of str, got {type(namespace).__name__}")
    for part in namespace:
        if not isinstance(part, str):
            raise InvalidTypeError(f"namespace parts must be str, got {type(part).__name__}")
        if SEPARATOR in part:
            raise InvalidValueError(f"namespace part {part!r} contains the reserved character \\x1f")
    return "".join(part + SEPARATOR for part in namespace)


def decode_namespace(text: str) -> Namespace:
    """The namespace tuple of a stored text."""
    return tuple(text.split(SEPARATOR)[:-1])


def prefix_range(prefix: Namespace) -> tuple[str, str]:
    """``(low, high)`` with ``low <= encoded < high`` exactly for namespaces under ``prefix``
    (the empty prefix covers every namespace)."""
    low = encode_namespace(prefix)
    return low, (low[:-1] + END) if low else "\U0010ffff"


def check_key(key: str) -> str:
    """A key is a str (any text, the empty one included)."""
    if not isinstance(key, str):
        raise InvalidTypeError(f"an item key is a str, got {type(key).__name__}")
    return key


def check_write(write: ItemWrite) -> ItemWrite:
    """Reject a write a store could not file."""
    if not isinstance(write, ItemWrite):
        raise InvalidTypeError(f"expected an ItemWrite, got {type(write).__name__}")
    encode_namespace(write.namespace)
    check_key(write.key)
    if write.value is not None and not isinstance(write.value, str):
        raise InvalidTypeError(f"an item value is a str, got {type(write.value).__name__}")
    positive_number("ttl_seconds", write.ttl_seconds, allow_none=True)
    return write


@runtime_checkable
class ItemStore(Protocol):
    """Where namespaced items live. Implementations are safe to use from many
    threads and, after a fork, from the child."""

    def write(self, writes: Sequence[ItemWrite]) -> list[bool]:
        """Apply a batch atomically, in order. For each write, whether it changed
        anything: a put always does, an ``if_absent`` put when it inserted, a
        delete when there was a live item."""
        ...

    def get(
        self, namespace: Namespace, keys: Sequence[str], *, refresh_ttl: bool = False
    ) -> list[StoredItem | None]:
        """The live items of ``keys`` in one namespace, in the order asked (None
        where there is none). ``refresh_ttl`` restarts the expiry of those found."""
        ...

    def scan(
        self,
        prefix: Namespace,
        *,
        exact: bool = False,
        before: str | None = None,
        descending: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[StoredItem]:
        """Live items in the namespace ``prefix`` (``exact``) or in every namespace
        that starts with it, ordered by (namespace, key), ascending or
        ``descending``; ``before`` keeps keys that sort before it."""
        ...

    def namespaces(self, prefix: Namespace = ()) -> list[Namespace]:
        """Every namespace under ``prefix`` that holds a live item, in order."""
        ...

    def delete_prefix(self, prefix: Namespace) -> int:
        """Delete every item in ``prefix`` and the namespaces under it; returns the count."""
        ...

    def purge_expired(self) -> int:
        """Delete expired items now (reads already skip them); returns the count."""
        ...

    def close(self) -> None:
        """Release connections this store opened itself (shared ones stay open)."""
        ...


@runtime_checkable
class HoldsItems(Protocol):
    """A store capability: the store can keep namespaced items (framework adapters
    call ``item_store()`` on the fact store they are given)."""

    def item_store(self) -> ItemStore:
        """An ItemStore on this store's own connections (same file, pool or client)."""
        ...


def scan_filter(
    prefix: Namespace, *, exact: bool, before: str | None, mark: str
) -> tuple[str, list[str]]:
    """The WHERE clause and parameters of a scan, for a SQL store whose
    placeholder is ``mark`` (``?`` for SQLite, ``%s`` for Postgres)."""
    if exact:
        where, params = f"ns = {mark}", [encode_namespace(prefix)]
    else:
        where, params = f"ns >= {mark} AND ns < {mark}", list(prefix_range(prefix))
    if before is not None:
        where += f" AND key < {mark}"
        params.append(check_key(before))
    return where, params


def check_page(limit: int | None, offset: int) -> tuple[int | None, int]:
    """A scan's ``limit`` (None: all; else >= 0) and ``offset`` (>= 0)."""
    if limit is not None:
        limit = integer("limit", limit, minimum=0)
    return limit, integer("offset", offset, minimum=0)


def expiry(now: float, ttl_seconds: float | None) -> float | None:
    """When an item written at ``now`` expires (None: never)."""
    return None if ttl_seconds is None else now + ttl_seconds
