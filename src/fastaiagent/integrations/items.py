"""Where an adapter keeps its items: resolve a location, store or Memory to an ItemStore."""

from __future__ import annotations

from typing import Any

from fastaiagent._validate import identifier, text
from fastaiagent.agent.memory import Memory
from fastaiagent.errors import InvalidTypeError
from fastaiagent.facts.factory import make_fact_store
from fastaiagent.facts.items import HoldsItems, ItemStore, Namespace, encode_namespace

__all__ = ["item_store_for", "root_namespace"]


def item_store_for(location: Any) -> ItemStore:
    """The :class:`~fastaiagent.facts.items.ItemStore` behind ``location``: a
    location string (``"sqlite"``, ``"sqlite:///path.db"``, ``postgresql://...``,
    ``redis://...``), a fact store that offers ``item_store()``, a
    :class:`~fastaiagent.Memory` (its store), or an ItemStore itself."""
    if isinstance(location, Memory):
        location = location.location
    if isinstance(location, ItemStore) and not isinstance(location, HoldsItems):
        return location
    store = make_fact_store(location) if isinstance(location, str) else location
    if isinstance(store, HoldsItems):
        return store.item_store()
    raise InvalidTypeError(
        f"{type(store).__name__} cannot keep items: pass a location string, a shipped "
        "fact store (SQLite, Postgres, Redis), a Memory, or a store with item_store()"
    )


def root_namespace(kind: str, project_id: str) -> Namespace:
    """The namespace an adapter files everything under: ``(kind, project_id)``,
    so two projects sharing a database never see each other's items."""
    root = (text("kind", kind), identifier("project_id", project_id, allow_empty=True))
    encode_namespace(root)  # rejects the reserved separator
    return root
