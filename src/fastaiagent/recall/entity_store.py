"""The entities of stored messages: found when a message is stored, drawn on by a query.

When recall stores a batch of a user's messages in the fact store
(:func:`add_with_entities`), each message's mentions are found
(:func:`~fastaiagent.recall.entities.mentions`, no LLM call), resolved in the
user's :class:`~fastaiagent.recall.entities.EntityBook` (``observe``), their
ids listed in the message's ``metadata["entities"]`` (so the index gives it one
keyword posting per entity: :func:`~fastaiagent.facts.entities.entity_term`)
and the book stored back, once per batch. A batch that mentions nothing
reads and writes no book. :func:`entity_candidates` is the entity side of a
query: the entities the query names (by name, alias or description), and the
user's messages mentioning them, in any session, by BM25 over those postings.

Where the book lives and how forget, export and import treat it:
:mod:`fastaiagent.facts.entities`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fastaiagent._validate import identifier
from fastaiagent._validate import text as check_text
from fastaiagent.facts import messages as stored_messages
from fastaiagent.facts.entities import (
    BOOK_ROOT,
    ENTITIES_KEY,
    book_namespace,
    book_stamp,
    entity_ids,
    entity_term,
    load_book,
    save_book,
    settle_book,
    with_entities,
)
from fastaiagent.facts.items import HoldsItems
from fastaiagent.facts.vectors import every_vector_index, recall_namespace, recorded_at
from fastaiagent.kb.protocols import Chunk, check_top_k, namespace_key
from fastaiagent.recall.entity_book import Entity, EntityBook

# A book's read, update and write are one step in the process, per user: a few
# striped locks (users share one by hash), so one user's storing never waits on
# all the others' round trips.
_LOCKS = [threading.Lock() for _ in range(64)]


def _lock(namespace: str) -> threading.Lock:
    return _LOCKS[hash(namespace) % len(_LOCKS)]

_books: dict[tuple[int, str], tuple[Any, EntityBook]] = {}  # the last data read -> its book
_BOOKS_HELD = 4096  # books kept parsed in the process (the oldest goes first)


_books_lock = threading.Lock()


def _keep(key: tuple[int, str], data: Any, book: EntityBook) -> None:
    with _books_lock:
        if key not in _books and len(_books) >= _BOOKS_HELD:
            _books.pop(next(iter(_books)))
        _books[key] = (data, book)


def _book(index: Any, namespace: str) -> EntityBook:
    """The user's book, built from the stored data once per version of it."""
    data = load_book(index, namespace)
    key = (id(getattr(index, "store", index)), namespace)
    with _books_lock:
        held = _books.get(key)
    if held is not None and held[0] is data and data is not None:
        return held[1]
    book = EntityBook() if data is None else EntityBook.from_dict(data)
    if data is not None:
        _keep(key, data, book)
    return book


def tag_messages(index: Any, chunks: Sequence[Chunk]) -> bool:
    """Read each of ``chunks`` into its namespace's book (:meth:`EntityBook.read`:
    its mentions found and resolved), list the ids of the entities it mentions in
    its ``metadata["entities"]`` and store each book that gained a mention.
    Chunks already listing entities (a re-embedded or imported message) and chunks
    outside a user's recall namespace are left as they are. Returns whether a
    book was stored."""
    if not isinstance(getattr(index, "store", None), HoldsItems):
        return False  # a VectorStore outside the fact store: no book to keep
    by_namespace: dict[str, list[Chunk]] = {}
    for chunk in chunks:
        namespace = namespace_key(chunk.metadata)
        if ENTITIES_KEY not in chunk.metadata and book_namespace(namespace) is not None:
            by_namespace.setdefault(namespace, []).append(chunk)
    stored = False
    for namespace, said in by_namespace.items():
        with _lock(namespace):
            book, named = _book(index, namespace), False
            for chunk in said:
                ids = book.read(chunk.text)
                if ids:
                    chunk.metadata = with_entities(chunk.metadata, ids)
                    named = True
            if named:  # a batch naming nothing leaves the stored book as it is
                data = book.to_dict()
                save_book(index, namespace, data)
                _keep((id(index.store), namespace), data, book)
                stored = True
    return stored


def add_with_entities(index: Any, chunks: Sequence[Chunk]) -> None:
    """``index.add(chunks)`` with their entities found first (:func:`tag_messages`):
    what recall calls to store a batch of messages."""
    tag_messages(index, chunks)
    namespaces = {namespace_key(chunk.metadata) for chunk in chunks}
    before = {namespace: book_stamp(index, namespace) for namespace in namespaces}
    index.add(chunks)
    for namespace in namespaces:  # the cached books stay current past this process's own add
        ids = [chunk.id for chunk in chunks if namespace_key(chunk.metadata) == namespace]
        settle_book(index, namespace, before[namespace], ids)


def backfill_entities(index: Any, namespace: str) -> int:
    """Find the entities of a user's messages stored before entities were kept (those
    without ``metadata["entities"]``): read into the book oldest first, then the
    messages that mention one written back with their own vectors, so their
    postings mark them. Returns how many were marked. A one-off for an operator
    (or an upgrade job): it holds the user's entity lock in this process while it
    reads (a live turn of theirs waits), about 0.15 ms a message. A message that mentions
    nothing is read again by a later backfill (nothing is counted twice: it
    mentioned nothing)."""
    check_text("namespace", namespace)
    if book_namespace(namespace) is None or not isinstance(getattr(index, "store", None), HoldsItems):
        return 0
    untagged = [c for c in index.chunks(namespace) if ENTITIES_KEY not in c.metadata]
    untagged.sort(key=lambda chunk: (recorded_at(chunk) is None, recorded_at(chunk) or 0.0))
    marked: dict[str, list[str]] = {}
    with _lock(namespace):
        book = _book(index, namespace)
        for chunk in untagged:
            ids = book.read(chunk.text)
            if ids:
                marked[chunk.id] = ids
        if marked:
            save_book(index, namespace, book.to_dict())
    for page in index.vector_pages(namespace) if marked else []:
        again = [
            Chunk(c.id, c.text, c.vector, with_entities(c.metadata, marked[c.id]))
            for c in page
            if c.id in marked and ENTITIES_KEY not in c.metadata
        ]
        if again:
            index.add(again)
    return len(marked)


@dataclass(frozen=True)
class EntityCandidates:
    """The entity side of a query: the ids of the entities it names (``entities``)
    and ``(message id, score)`` of the messages mentioning them, best first
    (BM25 over the entity postings: a message naming several of them, or a rarer
    one, ranks higher)."""

    entities: frozenset[str] = frozenset()
    hits: list[tuple[str, float]] = field(default_factory=list)


def entity_candidates(index: Any, namespace: str, query_text: str, limit: int) -> EntityCandidates:
    """The entities ``query_text`` names in the book of ``namespace``'s user (by
    name, alias or description) and up to ``limit`` of the user's messages in
    ``index`` that mention one, in any session. Nothing when the user has no book,
    the query names none of their entities, or the index keeps no postings.
    Costs no round trip for the book when the user stored nothing since the last
    search of ``index`` (the book is cached against the namespace's vectors), and
    one keyword search of the entity terms otherwise."""
    check_top_k(limit)
    check_text("namespace", namespace)
    check_text("query_text", query_text, allow_empty=True)
    score = getattr(index, "score_keywords", None)
    if not limit or not query_text.strip() or not callable(score):
        return EntityCandidates()
    with _lock(namespace):  # a book is not thread-safe: a turn storing meanwhile may be reading into it
        named = frozenset(_book(index, namespace).resolve(query_text))
    if not named:
        return EntityCandidates()
    terms = sorted({entity_term(entity_id) for entity_id in named})
    return EntityCandidates(named, list(score(terms, limit, namespace)))


def delete_message(store: Any, user_id: str, message_id: str, project_id: str = "") -> bool:
    """:func:`fastaiagent.facts.messages.delete_message` (the message, its postings,
    entity postings included, and cached embeddings), then its mentions taken off
    the user's book: each entity it named is mentioned once less, and one no
    stored message mentions any more leaves the book. What the Memory page and
    ``fastaiagent memory messages --delete`` call."""
    namespace = _user_namespace(user_id, project_id)
    named: set[str] = set()
    for index in every_vector_index(store):
        for chunk in index.get([check_text("message_id", message_id)]):
            if chunk.namespace == namespace:
                named.update(entity_ids(chunk.metadata))
    if not stored_messages.delete_message(store, user_id, message_id, project_id):
        return False
    if named:
        with _lock(namespace):
            data = load_book(store, namespace)
            if data is not None:
                book = EntityBook.from_dict(data)
                book.release(sorted(named))
                save_book(store, namespace, book.to_dict())
    return True


def _user_namespace(user_id: str, project_id: str) -> str:
    return recall_namespace(
        identifier("project_id", project_id, allow_empty=True), identifier("user_id", user_id)
    )


def user_entities(store: Any, user_id: str, project_id: str = "") -> list[Entity]:
    """Every entity in a user's book (for the Memory page and ``fastaiagent memory``),
    as the book lists them; [] when the store keeps none for them."""
    data = load_book(store, _user_namespace(user_id, project_id))
    return [] if data is None else EntityBook.from_dict(data).entities()


def entity_counts(store: Any) -> dict[tuple[str, str], int]:
    """``{(project_id, user_id): number of entities}`` of every user with a book, in one scan."""
    if not isinstance(store, HoldsItems):
        return {}
    import json

    counts: dict[tuple[str, str], int] = {}
    for item in store.item_store().scan((BOOK_ROOT,)):
        if len(item.namespace) == 3:
            counts[(item.namespace[1], item.namespace[2])] = len(
                EntityBook.from_dict(json.loads(item.value)).entities()
            )
    return counts


__all__ = [
    "EntityCandidates",
    "add_with_entities",
    "backfill_entities",
    "delete_message",
    "entity_candidates",
    "entity_counts",
    "tag_messages",
    "user_entities",
]
