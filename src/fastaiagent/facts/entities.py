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
  user_id)``, key ``"book"``, beside its revision (key ``"rev"``: a random
  token every write changes);
- **what each message counted** in the book: one item per message that named an
  entity (and per learned fact read into the book), in the namespace
  ``("fastaiagent.entity_marks", project_id, user_id)``, key ``"m:<message id>"``
  (``"f:<fact id>"``), value the JSON list of the entity ids it counted.

Every change of a book is a compare-and-set (:func:`commit_book`, one
:meth:`~fastaiagent.facts.items.ItemStore.write_all`): the book and its new
revision are written, and the marks of the messages it counts claimed, only
when the revision is still the one read and none of those messages was counted
before; otherwise nothing is written and the writer reads the book again. So
two processes storing one user's messages at once lose none of each other's
entities, and a message stored again under its own id (a retry, a replay, an
import) is counted once. The book, the revision and the marks are in the
user's export (items naming them); a forget deletes them with the user's
messages (the vector index's ``delete_namespace`` calls :func:`delete_book`).

Reads of a book are cached in the process per recall namespace, checked
against the generation of the namespace's in-memory vectors (which every
stored message bumps and a turn's dense search already reads): a turn whose
user stored nothing since asks the database nothing for the book. The cache
holds each book's data and what recall parsed from it (:func:`parsed_book`),
at most :data:`BOOK_CACHE_BYTES` per fact store, least recently used out
first: a book grows with what its user said, so a count of users bounds no memory.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from fastaiagent.facts.index.matrix import MatrixCache
from fastaiagent.facts.items import HoldsItems, ItemStore, ItemWrite

ENTITIES_KEY = "entities"
"""The metadata key of a stored message listing the ids of the entities it mentions."""

BOOK_ROOT = "fastaiagent.entities"
"""The first part of the item namespace of every user's entity book."""

BOOK_KEY = "book"
REV_KEY = "rev"

MARKS_ROOT = "fastaiagent.entity_marks"
"""The first part of the item namespace of what each of a user's messages counted."""

BOOK_CACHE_BYTES = 32 * 2**20
"""The bytes of entity books a fact store keeps cached in this process (their data
and the parsed book; docs/production.md, "What a process keeps"), least recently
used out first. A module value read when a store first reads or writes a book."""

# What a cached book holds: per byte of its JSON, the data as json.loads makes it and
# the parsed book sharing its strings (8.6-10.8x measured on everyday books of
# 5-20 entities), and per book the entry, its key and the book's shell.
_HELD_PER_JSON_BYTE = 9
_ENTRY_BYTES = 600

T = TypeVar("T")
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


def marks_namespace(recall_namespace: str) -> tuple[str, ...] | None:
    """The item namespace of the marks of the user owning ``recall_namespace``."""
    where = book_namespace(recall_namespace)
    return None if where is None else (MARKS_ROOT, *where[1:])


def message_mark(message_id: str) -> str:
    """The mark key of a stored message (what it counted in its user's book)."""
    return "m:" + message_id


def fact_mark(fact_id: int | str) -> str:
    """The mark key of a learned fact read into its user's book."""
    return f"f:{fact_id}"


class StoredBook(NamedTuple):
    """A user's book as read: its JSON data (None: no book) and its revision (None: none
    recorded), which a :func:`commit_book` must find unchanged."""

    data: dict[str, Any] | None
    rev: str | None


class _Cached:
    """A book as read or written, valid at ``stamp``; ``own``: this process's add
    since then, not yet seen by its copy of the vectors (see :func:`settle_book`);
    ``parsed``: what :func:`parsed_book` made of ``data``; ``nbytes``: what it is
    charged (from its JSON's length)."""

    __slots__ = ("data", "nbytes", "own", "parsed", "rev", "stamp")

    def __init__(self, book: StoredBook, stamp: Any, json_length: int, parsed: Any = None) -> None:
        self.data, self.rev, self.stamp, self.parsed = book.data, book.rev, stamp, parsed
        self.nbytes = _ENTRY_BYTES + json_length * _HELD_PER_JSON_BYTE
        self.own: tuple[Any, int, int, int, frozenset[str]] | None = None

    def current(self, index: Any, namespace: str, stamp: Any) -> bool:
        """Whether the book is still the stored one at ``stamp``: the copy is where it
        was read, or it moved by exactly this process's own add (its rows appended
        after the ones held then, nothing removed: no other writer came between)."""
        if stamp is None or self.stamp is None:
            return False
        if self.stamp == stamp:
            return True
        if self.own is None or self.own[0] != self.stamp:
            return False
        _, epoch, rows, dead, ids = self.own
        held = index.copies.held(namespace)
        fresh = held is not None and held.epoch == epoch and held.dead == dead and held.n == rows + len(ids)
        if fresh and set(held.keys[rows : held.n]) == ids:
            self.stamp, self.own = stamp, None
            return True
        return False


class _Books:
    """A fact store's item store (made once: ``item_store()`` makes a new one per
    call) and the books of its users this process read or wrote."""

    __slots__ = ("__weakref__", "cached", "items")

    def __init__(self, items: ItemStore) -> None:
        self.items = items
        self.cached: MatrixCache[_Cached] = MatrixCache(BOOK_CACHE_BYTES)

    def remember(self, namespace: str, entry: _Cached) -> None:
        with _cache_lock:
            self.cached.put(namespace, entry)  # a book larger than the whole budget is not kept


_cache_lock = threading.Lock()
_ATTRIBUTE = "_fastaiagent_entity_books"  # kept on the fact store: it goes when the store goes


def _books(store: Any) -> _Books | None:
    """The item store and cached books of a fact store (or of the one an index lives
    in); None for a store that keeps no items."""
    store = getattr(store, "store", store)
    if not isinstance(store, HoldsItems):
        return None
    held = getattr(store, "__dict__", None)
    if held is None:  # a store without attributes of its own: no cache
        return _Books(store.item_store())
    with _cache_lock:
        found = held.get(_ATTRIBUTE)
        if found is None:
            found = held[_ATTRIBUTE] = _Books(store.item_store())
        return found


def cached_books(store: Any) -> tuple[int, int]:
    """``(books, bytes)`` this process keeps cached for ``store`` (see :data:`BOOK_CACHE_BYTES`)."""
    books = _books(store)
    if books is None:
        return 0, 0
    with _cache_lock:
        return len(books.cached), books.cached.held


def _stamp(index: Any, namespace: str) -> Any:
    """The generation of this process's copy of ``namespace``'s vectors (None: no copy)."""
    copies = getattr(index, "copies", None)
    held = copies.held(namespace) if copies is not None else None
    return None if held is None else (id(index), held.version)


def load_book(index: Any, namespace: str) -> dict[str, Any] | None:
    """The stored book (its JSON data) of the user of ``namespace``, None when they
    have none. Cached: read again only when the namespace's vectors changed since."""
    return read_book(index, namespace).data


def read_book(index: Any, namespace: str, *, fresh: bool = False) -> StoredBook:
    """The book of the user of ``namespace`` and its revision (one read of both);
    the cached one as :func:`load_book` keeps it unless ``fresh`` (a writer whose
    compare-and-set failed reads what the other writer stored)."""
    books, where = _books(index), book_namespace(namespace)
    if books is None or where is None:
        return StoredBook(None, None)
    entry = _entry(books, where, index, namespace, fresh)
    return StoredBook(entry.data, entry.rev)


def parsed_book(
    index: Any, namespace: str, parse: Callable[[dict[str, Any]], T], *, fresh: bool = False
) -> tuple[StoredBook, T | None]:
    """:func:`read_book`, and what ``parse`` makes of the book's data (None: no book),
    made once per version of the book and cached with it (the caller may change
    it in place: what :func:`commit_book` writes, it is cached as)."""
    books, where = _books(index), book_namespace(namespace)
    if books is None or where is None:
        return StoredBook(None, None), None
    entry = _entry(books, where, index, namespace, fresh)
    if entry.data is not None and entry.parsed is None:
        entry.parsed = parse(entry.data)
    parsed: T | None = entry.parsed
    return StoredBook(entry.data, entry.rev), parsed


def _entry(books: _Books, where: tuple[str, ...], index: Any, namespace: str, fresh: bool) -> _Cached:
    """The cached book of ``namespace`` if still current (then used last), else read."""
    stamp = _stamp(index, namespace)
    with _cache_lock:
        held = books.cached.get(namespace)
        if not fresh and held is not None and held.current(index, namespace, stamp):
            books.cached.touch(namespace)
            return held
    item, rev = books.items.get(where, [BOOK_KEY, REV_KEY])
    book = StoredBook(None if item is None else json.loads(item.value), None if rev is None else rev.value)
    entry = _Cached(book, stamp, 0 if item is None else len(item.value))
    books.remember(namespace, entry)
    return entry


def counted(index: Any, namespace: str, keys: Sequence[str]) -> dict[str, list[str]]:
    """``{mark key: entity ids}`` of those of ``keys`` (:func:`message_mark`,
    :func:`fact_mark`) already counted in the book of the user of ``namespace``."""
    books, where = _books(index), marks_namespace(namespace)
    if books is None or where is None or not keys:
        return {}
    found = books.items.get(where, list(dict.fromkeys(keys)))
    return {item.key: json.loads(item.value) for item in found if item is not None}


def commit_book(
    index: Any,
    namespace: str,
    before: StoredBook,
    data: Mapping[str, Any],
    marks: Mapping[str, Sequence[str] | None] | None = None,
    parsed: Any = None,
) -> bool:
    """Store the book of the user of ``namespace`` (``data``) with a new revision,
    and its ``marks`` (key -> the entity ids the message or fact counted: claimed,
    never overwritten; None: the mark deleted), all or nothing and only when the
    stored revision is still ``before``'s and no claimed mark exists. Returns
    whether it was written; on False the caller reads the book again
    (:func:`read_book` ``fresh``) and redoes its change. ``parsed``: the book as
    :func:`parsed_book` would make it of ``data``, cached with it; a commit not
    written (lost or failed) leaves no cached book (the caller's may hold its change)."""
    books, where, marked = _books(index), book_namespace(namespace), marks_namespace(namespace)
    if books is None or where is None or marked is None:
        return True  # a store without items keeps no book
    rev = uuid.uuid4().hex
    guard = ItemWrite(where, REV_KEY, rev, if_absent=before.rev is None, if_value=before.rev)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    writes = [guard, ItemWrite(where, BOOK_KEY, text)]
    for key, ids in (marks or {}).items():
        value = None if ids is None else json.dumps(list(ids), ensure_ascii=False)
        writes.append(ItemWrite(marked, key, value, if_absent=value is not None))
    written = False
    try:
        written = books.items.write_all(writes)
    finally:
        if not written:
            with _cache_lock:
                books.cached.pop(namespace)
    if written:
        stored = StoredBook(data if isinstance(data, dict) else dict(data), rev)
        books.remember(namespace, _Cached(stored, None, len(text), parsed))
    return written


def book_stamp(index: Any, namespace: str) -> Any:
    """The generation of this process's copy of ``namespace``'s vectors in ``index``
    (None: no copy): what a cached book is checked against. A writer takes it
    before its add and hands it to :func:`settle_book` after."""
    return _stamp(index, namespace)


def settle_book(index: Any, namespace: str, before: Any, ids: Sequence[str] = ()) -> None:
    """After this process's add of ``ids`` to ``namespace`` (``before``:
    :func:`book_stamp` taken just before it), keep the cached book current: when
    the add is the only change since the book was read or saved, the book is
    still the stored one, and the next turn reads none. SQLite's copy moves to
    the add's own generation at once; Postgres' and Redis' learn of it at the
    next search, which then finds exactly these rows appended. Any other
    writer's change in between (rows of theirs, a removal) and the next turn
    reads the book again."""
    books, after = _books(index), _stamp(index, namespace)
    if books is None or after is None:
        return
    with _cache_lock:
        held = books.cached.get(namespace)
        if held is None or (held.stamp is not None and held.stamp != before):
            return
        if after != before:
            held.stamp, held.own = after, None
            return
        copy = index.copies.held(namespace)
        if copy is not None and ids:
            held.stamp = after
            held.own = (after, copy.epoch, copy.n, copy.dead, frozenset(ids))


def delete_book(store: Any, namespace: str) -> None:
    """Delete the book of the user of ``namespace``, its revision and its marks (what a
    forget calls): their entity postings go with their messages."""
    books, where, marked = _books(store), book_namespace(namespace), marks_namespace(namespace)
    if books is None or where is None or marked is None:
        return
    books.items.write([ItemWrite(where, REV_KEY, None), ItemWrite(where, BOOK_KEY, None)])
    books.items.delete_prefix(marked)
    with _cache_lock:
        books.cached.pop(namespace)


def with_entities(metadata: Mapping[str, Any], ids: Sequence[str]) -> dict[str, Any]:
    """``metadata`` listing ``ids`` (distinct, in order) as the message's entities."""
    return {**metadata, ENTITIES_KEY: list(dict.fromkeys(ids))}


__all__ = [
    "BOOK_KEY",
    "BOOK_ROOT",
    "ENTITIES_KEY",
    "MARKS_ROOT",
    "REV_KEY",
    "StoredBook",
    "book_namespace",
    "book_stamp",
    "cached_books",
    "commit_book",
    "counted",
    "delete_book",
    "entity_ids",
    "entity_term",
    "entity_terms",
    "fact_mark",
    "load_book",
    "marks_namespace",
    "message_mark",
    "parsed_book",
    "read_book",
    "settle_book",
    "with_entities",
]
