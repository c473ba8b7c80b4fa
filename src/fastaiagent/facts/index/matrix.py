"""Namespace matrices a vector index holds in memory, within a byte budget.

The SQLite and Postgres vector indexes keep each searched namespace's vectors
as one matrix, so a search reads the database only for what changed since.
:class:`MatrixCache` bounds what they hold: the least recently used matrices go
first, and one larger than the whole budget is not kept at all (it is searched
from a fresh read each time). Not thread-safe: each index calls it under its
own lock.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, Protocol, TypeVar


class Sized(Protocol):
    """What the cache measures: the bytes an item holds."""

    @property
    def nbytes(self) -> int: ...


M = TypeVar("M", bound=Sized)


class MatrixCache(Generic[M]):
    """Items by key, least recently used first out, at most ``limit`` bytes in all.

    An item's size is read when it is put, so an item grown in place is
    measured again by putting it again."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: OrderedDict[str, tuple[M, int]] = OrderedDict()
        self._held = 0  # bytes of the items, as measured when each was put

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    @property
    def held(self) -> int:
        """Bytes held, as measured when each item was put."""
        return self._held

    def get(self, key: str) -> M | None:
        """The item of ``key`` (its place in the eviction order unchanged), else None."""
        entry = self._items.get(key)
        return entry[0] if entry is not None else None

    def touch(self, key: str) -> None:
        """Mark ``key`` as just used: it is evicted last."""
        if key in self._items:
            self._items.move_to_end(key)

    def put(self, key: str, item: M) -> bool:
        """Hold ``item`` as the most recently used, evicting the least recently used
        beyond the limit; False (and nothing held for ``key``) when ``item`` alone
        is larger than the limit."""
        self.pop(key)
        size = int(item.nbytes)
        if size > self.limit:
            return False
        self._items[key] = (item, size)
        self._held += size
        while self._held > self.limit:
            _, (_, evicted) = self._items.popitem(last=False)
            self._held -= evicted
        return True

    def pop(self, key: str) -> None:
        """Forget ``key``'s item, if held."""
        entry = self._items.pop(key, None)
        if entry is not None:
            self._held -= entry[1]

    def clear(self) -> None:
        self._items.clear()
        self._held = 0


__all__ = ["MatrixCache"]
