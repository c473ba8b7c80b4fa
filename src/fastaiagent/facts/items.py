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

The protocol's verbs carry the argument checks and the sweeps every shipped
store shares; each backend (deriving from :class:`ItemFront`) only reads and
writes its own persistence.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import ClassVar, NamedTuple, Protocol, cast, runtime_checkable

from fastaiagent._validate import integer, positive_number, text_problem
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.scoping import expect

Namespace = tuple[str, ...]

PURGE_EVERY = 1000
"""Writes (per process) between sweeps of expired items (reads ignore them anyway)."""

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
    only when no live item has that key (the first writer wins); ``if_value``
    writes (or deletes) only when the live item's value is exactly that text (a
    compare-and-set: the writer that read it last wins nothing it did not see)."""

    namespace: Namespace
    key: str
    value: str | None
    ttl_seconds: float | None = None
    if_absent: bool = False
    if_value: str | None = None

    @property
    def conditional(self) -> bool:
        """Whether the write applies only under a condition (``if_absent`` or ``if_value``)."""
        return self.if_absent or self.if_value is not None


class ItemScan(NamedTuple):
    """A checked scan, as a backend receives it: namespaces (encoded) in
    ``[low, high)``, or exactly ``low`` when ``exact`` (``high`` is then "");
    keys before ``before``; ``limit`` None for all (never 0)."""

    low: str
    high: str
    exact: bool
    before: str | None
    descending: bool
    limit: int | None
    offset: int


def encode_namespace(namespace: Namespace) -> str:
    """The stored text of a namespace (checked: a tuple of str without the separator)."""
    if not isinstance(namespace, tuple):
        raise InvalidTypeError(f"a namespace is a tuple of str, got {type(namespace).__name__}")
    for part in namespace:
        if not isinstance(part, str):
            raise InvalidTypeError(f"namespace parts must be str, got {type(part).__name__}")
        if SEPARATOR in part:
            raise InvalidValueError(f"namespace part {part!r} contains the reserved character \\x1f")
        problem = text_problem(part)
        if problem is not None:
            raise InvalidValueError(f"namespace part {part[:40]!a} {problem}")
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
    """A key is a str (any text every backend stores, the empty one included)."""
    problem = text_problem(expect(key, str, "an item key is a str"))
    if problem is not None:
        raise InvalidValueError(f"item key {key[:40]!a} {problem}")
    return key


def check_write(write: ItemWrite) -> ItemWrite:
    """Reject a write a store could not file."""
    expect(write, ItemWrite, "expected an ItemWrite")
    encode_namespace(write.namespace)
    check_key(write.key)
    if write.value is not None:
        expect(write.value, str, "an item value is a str")
    if write.if_value is not None:
        expect(write.if_value, str, "if_value is a str (the value the item must hold)")
        if write.if_absent:
            raise InvalidValueError("a write takes if_absent or if_value, not both")
    positive_number("ttl_seconds", write.ttl_seconds, allow_none=True)
    return write


@runtime_checkable
class ItemStore(Protocol):
    """Where namespaced items live. Implementations are safe to use from many
    threads and, after a fork, from the child. ``write``, ``get``, ``scan``,
    ``namespaces`` and ``delete_prefix`` carry the bodies the shipped stores
    share (they derive from :class:`ItemFront`); another implementation writes
    its own."""

    def write(self, writes: Sequence[ItemWrite]) -> list[bool]:
        """Apply a batch atomically, in order. For each write, whether it changed
        anything: a put always does, an ``if_absent`` put when it inserted, a
        delete when there was a live item."""
        batch = [check_write(w) for w in writes]
        if not batch:
            return []
        front = cast(ItemFront, self)
        changed = front.write_batch(batch, time.time())
        front.count_writes(len(batch))
        return changed

    def write_all(self, writes: Sequence[ItemWrite]) -> bool:
        """Apply a batch atomically only when every conditional write in it
        (``if_absent``, ``if_value``) applies; otherwise write nothing. Returns
        whether the batch was written. The compare-and-set of a document several
        processes update: read it, change it, write it back ``if_value`` what was
        read, and read again when another writer came first."""
        batch = [check_write(w) for w in writes]
        if not batch:
            return True
        front = cast(ItemFront, self)
        done = front.write_guarded(batch, time.time())
        front.count_writes(len(batch))
        return done

    def get(
        self, namespace: Namespace, keys: Sequence[str], *, refresh_ttl: bool = False
    ) -> list[StoredItem | None]:
        """The live items of ``keys`` in one namespace, in the order asked (None
        where there is none). ``refresh_ttl`` restarts the expiry of those found."""
        ns = encode_namespace(namespace)
        wanted = [check_key(k) for k in keys]
        if not wanted:
            return []
        items = cast(ItemFront, self).read_items(ns, wanted, refresh_ttl)
        found = {item.key: item for item in items}
        return [found.get(k) for k in wanted]

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
        limit, offset = check_page(limit, offset)
        low, high = (encode_namespace(prefix), "") if exact else prefix_range(prefix)
        last = None if before is None else check_key(before)
        if limit == 0:
            return []
        wanted = ItemScan(low, high, bool(exact), last, bool(descending), limit, offset)
        return cast(ItemFront, self).scan_items(wanted)

    def namespaces(self, prefix: Namespace = ()) -> list[Namespace]:
        """Every namespace under ``prefix`` that holds a live item, in order."""
        found = cast(ItemFront, self).read_namespaces(*prefix_range(prefix))
        return [decode_namespace(ns) for ns in found]

    def delete_prefix(self, prefix: Namespace) -> int:
        """Delete every item in ``prefix`` and the namespaces under it; returns the count."""
        return cast(ItemFront, self).delete_range(*prefix_range(prefix))

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


def check_page(limit: int | None, offset: int) -> tuple[int | None, int]:
    """A scan's ``limit`` (None: all; else >= 0) and ``offset`` (>= 0)."""
    if limit is not None:
        limit = integer("limit", limit, minimum=0)
    return limit, integer("offset", offset, minimum=0)


def expiry(now: float, ttl_seconds: float | None) -> float | None:
    """When an item written at ``now`` expires (None: never)."""
    return None if ttl_seconds is None else now + ttl_seconds


class ItemFront(ItemStore):
    """The base of the shipped item stores: :class:`ItemStore` checks every
    call's arguments and sweeps expired items every :data:`PURGE_EVERY` writes;
    a backend implements the hooks below (and ``purge_expired``) on its own
    persistence, given checked and encoded arguments."""

    purge_every: ClassVar[int] = PURGE_EVERY
    _writes = 0  # this process's writes since the last sweep

    def count_writes(self, count: int) -> None:
        """Count ``count`` writes; every :attr:`purge_every`, sweep expired items."""
        self._writes += count
        if self._writes >= self.purge_every:
            self._writes = 0
            self.purge_expired()

    def write_batch(self, batch: list[ItemWrite], now: float) -> list[bool]:
        """The backend's part of :meth:`write`: a checked, non-empty batch at ``now``."""
        raise NotImplementedError

    def write_guarded(self, batch: list[ItemWrite], now: float) -> bool:
        """The backend's part of :meth:`write_all`: a checked, non-empty batch at
        ``now``, applied only when each of its conditional writes applies."""
        raise NotImplementedError

    def read_items(self, ns: str, keys: list[str], refresh_ttl: bool) -> Iterable[StoredItem]:
        """The backend's part of :meth:`get`: the live items of ``keys`` (checked, not
        empty) in the encoded namespace ``ns``, in any order."""
        raise NotImplementedError

    def scan_items(self, scan: ItemScan) -> list[StoredItem]:
        """The backend's part of :meth:`scan`, in (namespace, key) order."""
        raise NotImplementedError

    def read_namespaces(self, low: str, high: str) -> list[str]:
        """The backend's part of :meth:`namespaces`: the encoded namespaces in
        ``[low, high)`` that hold a live item, in order."""
        raise NotImplementedError

    def delete_range(self, low: str, high: str) -> int:
        """The backend's part of :meth:`delete_prefix`: delete every item of the
        encoded namespaces in ``[low, high)``; returns the count."""
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to release: the connections (file, pool or client) belong to the fact store."""
