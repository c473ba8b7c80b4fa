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

import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastaiagent._validate import identifier
from fastaiagent._validate import text as check_text
from fastaiagent.errors import ConflictError
from fastaiagent.facts import messages as stored_messages
from fastaiagent.facts.entities import (
    BOOK_KEY,
    BOOK_ROOT,
    ENTITIES_KEY,
    StoredBook,
    book_namespace,
    book_stamp,
    commit_book,
    counted,
    entity_ids,
    entity_term,
    fact_mark,
    load_book,
    message_mark,
    parsed_book,
    settle_book,
    with_entities,
)
from fastaiagent.facts.items import HoldsItems
from fastaiagent.facts.vectors import every_vector_index, recall_namespace, recorded_at
from fastaiagent.kb.protocols import Chunk, check_top_k, namespace_key
from fastaiagent.recall.entity_book import Entity, EntityBook
from fastaiagent.recall.words import as_said_by_user

# A book's read, update and write are one step in the process, per user: a few
# striped locks (users share one by hash), so one user's storing never waits on
# all the others' round trips. Across processes the compare-and-set of
# :func:`commit_book` keeps them apart.
_LOCKS = [threading.Lock() for _ in range(64)]
_ATTEMPTS = 200  # compare-and-set rounds before a writer gives up (each loses only to a writer that won)


def _lock(namespace: str) -> threading.Lock:
    return _LOCKS[hash(namespace) % len(_LOCKS)]


def _book(index: Any, namespace: str, fresh: bool = False) -> tuple[StoredBook, EntityBook]:
    """The user's stored book and its parse (made once per version of it, cached with it)."""
    stored, book = parsed_book(index, namespace, EntityBook.from_dict, fresh=fresh)
    return stored, book or EntityBook()


Change = Callable[[EntityBook, bool], Mapping[str, Sequence[str] | None] | None]
"""A change of a book: given it (and whether this is a retry, after another writer
came first), it edits the book and returns the marks to write with it
(:func:`~fastaiagent.facts.entities.commit_book`), or None to write nothing."""


def change_book(index: Any, namespace: str, change: Change) -> bool:
    """Apply ``change`` to the book of the user of ``namespace`` and store it by
    compare-and-set: when another writer (another process, or a store object of
    its own) stored the book or counted one of the marks meanwhile, the book is
    read again and ``change`` redone on it. Returns whether a book was stored.
    Raises :class:`~fastaiagent.errors.ConflictError` after :data:`_ATTEMPTS`
    lost rounds (a writer loses a round only to one that won it)."""
    with _lock(namespace):
        for attempt in range(_ATTEMPTS):
            stored, book = _book(index, namespace, fresh=attempt > 0)
            marks = change(book, attempt > 0)
            if marks is None:
                return False
            # Not written (lost or failed): the cached parse, holding the change, is dropped.
            if commit_book(index, namespace, stored, book.to_dict(), marks, parsed=book):
                return True
            time.sleep(random.uniform(0, 0.002) * min(attempt + 1, 10))
    raise ConflictError(f"the entity book of {namespace!r} kept changing under {_ATTEMPTS} attempts to write it")


def _count(index: Any, namespace: str, said: Sequence[Chunk]) -> dict[str, list[str]]:
    """Count ``said`` (messages of one user) in the user's book, each message once
    ever: a message counted before (its mark stored) keeps the entity ids it
    counted then. Returns ``{message id: entity ids}`` of those naming one."""
    found: dict[str, list[str]] = {}

    def read(book: EntityBook, retry: bool) -> dict[str, Sequence[str] | None] | None:
        done = counted(index, namespace, [message_mark(c.id) for c in said]) if retry else {}
        found.clear()
        marks: dict[str, Sequence[str] | None] = {}
        for chunk in said:
            mark = message_mark(chunk.id)
            if mark in done or chunk.id in found:  # counted already (or twice in this batch)
                found.setdefault(chunk.id, done.get(mark, []))
                continue
            ids = book.read(chunk.text)
            if ids:
                found[chunk.id] = marks[mark] = ids
        return marks or None

    change_book(index, namespace, read)
    return {chunk_id: ids for chunk_id, ids in found.items() if ids}


def tag_messages(index: Any, chunks: Sequence[Chunk]) -> bool:
    """Read each of ``chunks`` into its namespace's book (:meth:`EntityBook.read`:
    its mentions found and resolved), list the ids of the entities it mentions in
    its ``metadata["entities"]`` and store each book that gained a mention. A
    message counted before under its id (a retry, a replay) is not counted again:
    it gets the ids it counted then. Chunks already listing entities (a
    re-embedded or imported message) and chunks outside a user's recall
    namespace are left as they are. Returns whether a chunk was marked."""
    if not isinstance(getattr(index, "store", None), HoldsItems):
        return False  # a VectorStore outside the fact store: no book to keep
    by_namespace: dict[str, list[Chunk]] = {}
    for chunk in chunks:
        namespace = namespace_key(chunk.metadata)
        if ENTITIES_KEY not in chunk.metadata and book_namespace(namespace) is not None:
            by_namespace.setdefault(namespace, []).append(chunk)
    marked = False
    for namespace, said in by_namespace.items():
        found = _count(index, namespace, said)
        for chunk in said:
            if chunk.id in found:
                chunk.metadata = with_entities(chunk.metadata, found[chunk.id])
                marked = True
    return marked


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
    reads (a live turn of theirs waits), about 0.15 ms a message. A message is
    counted once, however often a backfill runs (its mark stays)."""
    check_text("namespace", namespace)
    if book_namespace(namespace) is None or not isinstance(getattr(index, "store", None), HoldsItems):
        return 0
    untagged = [c for c in index.chunks(namespace) if ENTITIES_KEY not in c.metadata]
    untagged.sort(key=lambda chunk: (recorded_at(chunk) is None, recorded_at(chunk) or 0.0))
    marked = _count(index, namespace, untagged) if untagged else {}
    for page in index.vector_pages(namespace) if marked else []:
        again = [
            Chunk(c.id, c.text, c.vector, with_entities(c.metadata, marked[c.id]))
            for c in page
            if c.id in marked and ENTITIES_KEY not in c.metadata
        ]
        if again:
            index.add(again)
    return len(marked)


def read_facts(store: Any, user_id: str, facts: Sequence[tuple[int, str]], project_id: str = "") -> bool:
    """Read facts learned about a user (``(fact id, text)``, what ``Memory(learn=...)``
    stores) into that user's book, each once ever: their names, descriptions and
    aliases join the entities of the user's messages ("The user's sister Lena
    lives in Porto" makes "my sister" Lena), so a query naming one draws in
    the messages about it. Written as the user says it ("The user's" reads as
    "my": :func:`~fastaiagent.recall.words.as_said_by_user`). No LLM call; one
    book write. Returns whether the book changed."""
    namespace = _user_namespace(user_id, project_id)
    if not isinstance(store, HoldsItems) or not facts:
        return False

    def read(book: EntityBook, retry: bool) -> dict[str, Sequence[str] | None] | None:
        done = counted(store, namespace, [fact_mark(i) for i, _ in facts]) if retry else {}
        marks: dict[str, Sequence[str] | None] = {}
        for fact_id, text in facts:
            mark = fact_mark(fact_id)
            if mark not in done and mark not in marks:
                ids = book.read(as_said_by_user(check_text("fact text", text)))
                if ids:
                    marks[mark] = ids
        return marks or None

    return change_book(store, namespace, read)


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
        named = frozenset(_book(index, namespace)[1].resolve(query_text))
    if not named:
        return EntityCandidates()
    terms = sorted({entity_term(entity_id) for entity_id in named})
    return EntityCandidates(named, list(score(terms, limit, namespace)))


def delete_message(store: Any, user_id: str, message_id: str, project_id: str = "") -> bool:
    """:func:`fastaiagent.facts.messages.delete_message` (the message, its postings,
    entity postings included, and cached embeddings), then its mentions taken off
    the user's book (what it counted: its mark, else the ids it lists) and its
    mark deleted: each entity it named is mentioned once less, and one no
    stored message mentions any more leaves the book. What the Memory page and
    ``fastaiagent memory messages --delete`` call."""
    namespace = _user_namespace(user_id, project_id)
    mark = message_mark(check_text("message_id", message_id))
    named = counted(store, namespace, [mark]).get(mark)
    if named is None:  # stored before marks were kept: the ids it lists
        named = _listed(store, namespace, message_id)
    if not stored_messages.delete_message(store, user_id, message_id, project_id):
        return False

    def release(book: EntityBook, retry: bool) -> dict[str, Sequence[str] | None] | None:
        if not len(book):
            return None
        book.release(list(named))
        return {mark: None}

    if named:
        change_book(store, namespace, release)
    return True


def _listed(store: Any, namespace: str, message_id: str) -> list[str]:
    """The entity ids a stored message of ``namespace`` lists, in any size's index."""
    named: set[str] = set()
    for index in every_vector_index(store):
        for chunk in index.get([message_id]):
            if chunk.namespace == namespace:
                named.update(entity_ids(chunk.metadata))
    return sorted(named)


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
        if len(item.namespace) == 3 and item.key == BOOK_KEY:
            counts[(item.namespace[1], item.namespace[2])] = len(
                EntityBook.from_dict(json.loads(item.value)).entities()
            )
    return counts


__all__ = [
    "EntityCandidates",
    "add_with_entities",
    "backfill_entities",
    "change_book",
    "delete_message",
    "entity_candidates",
    "entity_counts",
    "read_facts",
    "tag_messages",
    "user_entities",
]
