"""The capabilities a shipped fact store offers beside the FactStore protocol.

Each capability of a backend lives in a module of its folder
(``<backend>/windows.py``, ``items.py``, ``vectors.py``) and is made
on the store's own connections. A store gets all three by deriving from
:class:`StoreCapabilities` and naming its backend; the vector index is made
once per store and vector size, because it keeps each namespace's matrix in
memory. Vectors of another size than the default index's go to an index of
their own beside it (each backend's ``beside``), so agents with embedders of
different sizes share one database.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any, ClassVar

from fastaiagent.errors import StoreCorruptError
from fastaiagent.kb.protocols import check_dimension

_lock = threading.Lock()


class StoreCapabilities:
    """``window_store()``, ``item_store()`` and ``vector_store()`` for a shipped store
    (the HoldsWindows, HoldsItems and HoldsVectors capabilities)."""

    backend: ClassVar[str]  # the folder: "sqlite", "postgres" or "redis"
    backend_class: ClassVar[str]  # the class prefix: "SQLite", "Postgres" or "Redis"

    def _capability(self, module: str, suffix: str) -> Any:
        found = importlib.import_module(f"fastaiagent.facts.{self.backend}.{module}")
        return getattr(found, self.backend_class + suffix)(self)

    def window_store(self) -> Any:
        """Shared conversation windows on this store's connections (the
        :class:`~fastaiagent.facts.windows.HoldsWindows` capability)."""
        return self._capability("windows", "WindowStore")

    def item_store(self) -> Any:
        """Namespaced items (framework adapters' state) on this store's connections
        (the :class:`~fastaiagent.facts.items.HoldsItems` capability)."""
        return self._capability("items", "ItemStore")

    def vector_store(self, dimension: int | None = None) -> Any:
        """Durable vectors, keyword postings and cached embeddings on this store's
        connections (the :class:`~fastaiagent.facts.vectors.HoldsVectors` capability);
        one index per store and size, shared by every caller.

        ``dimension`` None, or the size the default index holds (or any size while
        it holds none: that size is then fixed), gives the default index. Another
        size gives an index of that size beside it (its own table or key prefix,
        named by the size, e.g. ``memory_vectors_d768``), noted in the database so
        :meth:`vector_dimensions` of any process lists it."""
        size = check_dimension(dimension)
        with _lock:
            default = self.__dict__.get("_vector_index")
            if default is None:
                default = self.__dict__["_vector_index"] = self._capability("vectors", "VectorIndex")
            sized: dict[int, Any] = self.__dict__.setdefault("_vector_indexes", {})
            lock = self.__dict__.setdefault("_vector_lock", threading.Lock())
        if size is None:
            return default
        with lock:  # per store: opening a size reads (and may write) the database
            index = sized.get(size)
            if index is None:
                index = sized[size] = _sized(default, size)
            return index

    def _forget_vector_indexes(self) -> None:
        """Let go of the vector indexes made so far (``destroy()`` dropped their
        tables or keys): the next :meth:`vector_store` makes them anew."""
        with _lock:
            self.__dict__.pop("_vector_index", None)
            self.__dict__.pop("_vector_indexes", None)

    def vector_dimensions(self) -> list[int]:
        """The vector sizes this store's indexes hold, read from the database (so the
        indexes other processes opened are listed), smallest first."""
        default = self.vector_store()
        held = {default.dimension, *default.recorded_dimensions()}
        return sorted(size for size in held if size is not None)

    def vector_indexes(self) -> list[Any]:
        """Every size's index (:meth:`vector_dimensions`), the default one first even
        when it holds nothing: what a forget of a user empties."""
        found = {id(index): index for index in [self.vector_store()]}
        for size in self.vector_dimensions():
            index = self.vector_store(size)
            found.setdefault(id(index), index)
        return list(found.values())


def _sized(default: Any, size: int) -> Any:
    """The index of ``size`` for :meth:`StoreCapabilities.vector_store`."""
    held = default.dimension
    if held is None:
        held = default.claim_dimension(size)  # atomic: two processes agree on who has it
    if held == size:
        return default
    index = default.beside(size)
    if index.dimension is None:
        default.record_dimension(size)  # before the claim: never an index nobody lists
        index.claim_dimension(size)
    if index.dimension != size:
        raise StoreCorruptError(
            f"{index!r} should hold {size}-dimensional vectors but holds "
            f"{index.dimension}-dimensional ones; drop it (re-embedding refills it)"
        )
    return index
