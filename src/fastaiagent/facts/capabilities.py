"""The capabilities a shipped fact store offers beside the FactStore protocol.

Each capability of a backend lives in a module of its folder
(``<backend>/windows.py``, ``items.py``, ``vectors.py``) and is made
on the store's own connections. A store gets all three by deriving from
:class:`StoreCapabilities` and naming its backend; the vector index is made
once per store, because it keeps each namespace's matrix in memory.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any, ClassVar

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

    def vector_store(self) -> Any:
        """Durable vectors, keyword postings and cached embeddings on this store's
        connections (the :class:`~fastaiagent.facts.vectors.HoldsVectors` capability);
        one index per store, shared by every caller."""
        with _lock:
            index = self.__dict__.get("_vector_index")
            if index is None:
                index = self.__dict__["_vector_index"] = self._capability("vectors", "VectorIndex")
            return index
