"""Where a user's entities live in the fact store: their book, and the postings of each message.

Recall finds the things a user talks about (people, pets, places...) in each
stored message (:mod:`fastaiagent.recall.entity_store` does it, with
:mod:`fastaiagent.recall.entities`) and keeps two things in the fact store,
the same way on every backend:

- **the message's entity ids**, in its ``metadata["entities"]`` (a list of str),
  and one keyword posting per id, :func:`entity_term` (``keyword_tokens`` adds
  them: the text analyzer's part of :data:`~fastaiagent.facts.vectors.ANALYZER_VERSION`).
  A keyword search for an entity's term therefore finds every message about it,
  in every session; deleting a message deletes its postings with it;
- **the user's book** (every entity, its aliases, descriptions and mention
  count: JSON), one item of the store's item store
  (:class:`~fastaiagent.facts.items.ItemStore`: a table on SQLite and Postgres,
  a hash on Redis) in the namespace ``("fastaiagent.entities", project_id,
  user_id)``, key ``"book"``. It is in the user's export (an item naming
  them), and a forget deletes it with the user's messages (the vector index's
  ``delete_namespace`` calls :func:`delete_book`).

Reads of a book are cached in the process per recall namespace, checked
against the generation of the namespace's in-memory vectors (which every
stored message bumps and a turn's dense search already reads): a turn whose
user stored nothing since asks the database nothing for the book.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from fastaiagent.facts.items import HoldsItems, ItemStore, ItemWrite

ENTITIES_KEY = "entities"
"""The metadata key of a stored message listing the ids of the entities it mentions."""

BOOK_ROOT = "fastaiagent.entities"
"""The first part of the item namespace of every user's entity book."""

BOOK_KEY = "book"

_TERM_PREFIX = "ent"
_TERM_DIGITS = 20


def entity_term(entity_id: str) -> str:
    """The keyword posting marking a message as mentioning ``entity_id``: ``ent`` and
    20 hex digits of its SHA-256. Word characters only (every backend's postings
    keep it whole), and no word a person writes: the tokenizer never makes it."""
    digest = hashlib.sha256(entity_id.encode("utf-8")).hexdigest()
    return _TERM_PREFIX + digest[:_TERM_DIGITS]


def entity_ids(metadata: Mapping[str, Any]) -> list[str]:
    """The entity ids a stored message's metadata lists (none when absent or malformed)."""
    found = metadata.get(ENTITIES_KEY)
    if not isinstance(found, list):
        return []
    return [item for item in found if isinstance(item, str) and item]


def entity_terms(metadata: Mapping[str, Any]) -> list[str]:
    """The keyword postings of a stored message's entities (:func:`entity_term` of each id)."""
    return [entity_term(entity_id) for entity_id in dict.fromkeys(entity_ids(metadata))]


def book_namespace(recall_namespace: str) -> tuple[str, ...] | None:
    """The item namespace of the book of the user owning ``recall_namespace``
    (``user:<id>`` or ``<project>:user:<id>``); None for any other namespace."""
    from fastaiagent.facts.messages import recall_user  # messages imports this module's users

    owner = recall_user(recall_namespace)
    return None if owner is None else (BOOK_ROOT, *owner)


def _items(store: Any) -> ItemStore | None:
    """The item store of a fact store (or of the fact store an index lives in)."""
    store = getattr(store, "store", store)
    return store.item_store() if isinstance(store, HoldsItems) else None


class _Cached:
    __slots__ = ("data", "stamp")

    def __init__(self, data: dict[str, Any] | None, stamp: Any) -> None:
        self.data, self.stamp = data, stamp


_cache: dict[tuple[int, str], _Cached] = {}
_cache_lock = threading.Lock()
_CACHE_LIMIT = 4096  # users whose book a process keeps (a few KB each)


def _stamp(index: Any, namespace: str) -> Any:
    """The generation of this process's copy of ``namespace``'s vectors (None: no copy)."""
    copies = getattr(index, "copies", None)
    held = copies.held(namespace) if copies is not None else None
    return None if held is None else (id(index), held.version)


def load_book(index: Any, namespace: str) -> dict[str, Any] | None:
    """The stored book (its JSON data) of the user of ``namespace``, None when they
    have none. Cached: read again only when the namespace's vectors changed since."""
    items, where = _items(index), book_namespace(namespace)
    if items is None or where is None:
        return None
    key, stamp = (id(items), namespace), _stamp(index, namespace)
    with _cache_lock:
        held = _cache.get(key)
    if held is not None and stamp is not None and held.stamp == stamp:
        return held.data
    [item] = items.get(where, [BOOK_KEY])
    data = None if item is None else json.loads(item.value)
    _remember(key, data, stamp)
    return data


def save_book(index: Any, namespace: str, data: Mapping[str, Any]) -> None:
    """Store the book of the user of ``namespace`` (one write; the last writer wins)."""
    items, where = _items(index), book_namespace(namespace)
    if items is None or where is None:
        return
    items.write([ItemWrite(where, BOOK_KEY, json.dumps(data, ensure_ascii=False, separators=(",", ":")))])
    held = data if isinstance(data, dict) else dict(data)
    _remember((id(items), namespace), held, None)  # read again unless settle_book vouches


def settle_book(index: Any, namespace: str) -> None:
    """After the index stored the batch whose book :func:`save_book` wrote, mark the
    cached book current for the namespace's new generation (no read next turn)."""
    items = _items(index)
    if items is None:
        return
    stamp = _stamp(index, namespace)
    with _cache_lock:
        held = _cache.get((id(items), namespace))
        if held is not None and held.stamp is None and stamp is not None:
            held.stamp = stamp


def delete_book(store: Any, namespace: str) -> None:
    """Delete the book of the user of ``namespace`` (what a forget calls): their
    entity postings go with their messages."""
    items, where = _items(store), book_namespace(namespace)
    if items is None or where is None:
        return
    items.write([ItemWrite(where, BOOK_KEY, None)])
    with _cache_lock:
        _cache.pop((id(items), namespace), None)


def _remember(key: tuple[int, str], data: dict[str, Any] | None, stamp: Any) -> None:
    with _cache_lock:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.pop(next(iter(_cache)))
        _cache[key] = _Cached(data, stamp)


def with_entities(metadata: Mapping[str, Any], ids: Sequence[str]) -> dict[str, Any]:
    """``metadata`` listing ``ids`` (distinct, in order) as the message's entities."""
    return {**metadata, ENTITIES_KEY: list(dict.fromkeys(ids))}


__all__ = [
    "BOOK_KEY",
    "BOOK_ROOT",
    "ENTITIES_KEY",
    "book_namespace",
    "delete_book",
    "entity_ids",
    "entity_term",
    "entity_terms",
    "load_book",
    "save_book",
    "settle_book",
    "with_entities",
]
