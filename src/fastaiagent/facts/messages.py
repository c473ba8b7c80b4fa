"""A user's recalled messages in the fact store, for an operator: list, search, delete one.

``Memory(recall="auto")`` and ``Memory.add_history`` keep a user's messages in
the fact store's vector indexes (one per vector size,
:func:`~fastaiagent.facts.vectors.every_vector_index`), under the user's recall
namespace (:func:`~fastaiagent.facts.vectors.recall_namespace`). These
functions read and change them there, one user at a time, in every size's
index, and need no embedder: the list is read newest first from the time index
(``newest``), a search is the index's own keyword side of recall
(``keyword_search``), and a delete is the index's ``delete``, which removes the
message's vector, its keyword postings and every process's in-memory copy of it
(recall no longer finds it), its entity postings included, then its cached
embeddings (``forget_cached``); the user's entity book is left as it is
(:func:`fastaiagent.recall.entity_store.delete_message` also lowers its
mention counts). A message id of another user changes nothing.

Messages kept in a VectorStore passed as ``recall=`` (FAISS, Qdrant, ...) are
not in the fact store and are not seen here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastaiagent._validate import identifier, integer, text
from fastaiagent.errors import InvalidValueError
from fastaiagent.facts.fact import SCOPES
from fastaiagent.facts.vectors import (
    ListsNewest,
    embedded_text,
    every_vector_index,
    recall_namespace,
    recorded_at,
    text_key,
)
from fastaiagent.kb.protocols import Chunk

DEFAULT_PAGE = 50
_USER = "user:"
_FACTS = "facts:"  # the semantic fact index's namespaces (facts.semantic.subject_namespace)


@dataclass(frozen=True)
class StoredMessage:
    """One recalled message as stored: its id (what :func:`delete_message` takes), its
    text, who said it (``role``, and ``speaker`` when the message had a name) and
    when (``created_at``, epoch seconds; None when the entry has no time)."""

    id: str
    text: str
    role: str
    created_at: float | None
    speaker: str = ""


@dataclass(frozen=True)
class MessageUser:
    """A user whose messages the store holds, in one project, with how many."""

    user_id: str
    project_id: str
    messages: int


def _message(chunk: Chunk) -> StoredMessage:
    role, speaker = chunk.metadata.get("role"), chunk.metadata.get("speaker")
    return StoredMessage(
        id=chunk.id,
        text=chunk.text,
        role=role if isinstance(role, str) else "",
        created_at=recorded_at(chunk),
        speaker=speaker if isinstance(speaker, str) else "",
    )


def _namespace(user_id: str, project_id: str) -> str:
    if user_id == "*":
        raise InvalidValueError('name one user: messages are read and deleted one user at a time, not "*"')
    user = identifier("user_id", user_id)
    return recall_namespace(identifier("project_id", project_id, allow_empty=True), user)


def _indexes(store: Any) -> list[Any]:
    return [index for index in every_vector_index(store) if isinstance(index, ListsNewest)]


def list_messages(
    store: Any, user_id: str, project_id: str = "", *, limit: int = DEFAULT_PAGE, offset: int = 0
) -> list[StoredMessage]:
    """One page of a user's recalled messages, newest first (``offset`` skips that
    many); across every size's index when the embedder changed over time."""
    namespace = _namespace(user_id, project_id)
    size, skip = integer("limit", limit, minimum=0), integer("offset", offset, minimum=0)
    chunks: list[Chunk] = []
    for index in _indexes(store):  # each index's first offset+limit, merged
        chunks += index.newest(namespace, size + skip, 0) if size else []
    ordered = sorted(chunks, key=_newest_first)
    return [_message(chunk) for chunk in ordered[skip : skip + size]]


def _newest_first(chunk: Chunk) -> tuple[int, float]:
    at = recorded_at(chunk)
    return (1, 0.0) if at is None else (0, -at)


def count_messages(store: Any, user_id: str, project_id: str = "") -> int:
    """How many recalled messages the store holds of a user."""
    namespace = _namespace(user_id, project_id)
    return sum(int(index.count(namespace)) for index in _indexes(store))


def search_messages(
    store: Any, user_id: str, text_query: str, project_id: str = "", *, limit: int = DEFAULT_PAGE
) -> list[StoredMessage]:
    """A user's messages matching ``text_query`` by keywords (recall's keyword side:
    the same tokens, stemming and BM25 as a turn's recall), best first."""
    namespace = _namespace(user_id, project_id)
    query, size = text("text", text_query), integer("limit", limit, minimum=0)
    found: list[tuple[float, Chunk]] = []
    for index in _indexes(store):
        hits = index.keyword_search(query, size, namespace=namespace) if size else []
        by_id = {chunk.id: chunk for chunk in index.get([i for i, _ in hits])}
        found += [(score, by_id[i]) for i, score in hits if i in by_id]
    found.sort(key=lambda pair: -pair[0])
    return [_message(chunk) for _, chunk in found[:size]]


def delete_message(store: Any, user_id: str, message_id: str, project_id: str = "") -> bool:
    """Delete one of a user's messages from every size's index (its vector, keyword
    postings and in-memory copies: recall no longer finds it); False when the user
    has no message ``message_id`` (another user's id deletes nothing)."""
    namespace = _namespace(user_id, project_id)
    wanted = text("message_id", message_id)
    deleted = 0
    for index in _indexes(store):
        for chunk in index.get([wanted]):
            if chunk.namespace == namespace:
                deleted += int(index.delete([wanted]))
                _forget_embedding(index, namespace, chunk)
    return deleted > 0


def _forget_embedding(index: Any, namespace: str, chunk: Chunk) -> None:
    """Drop the message's cached embeddings (of its text, and of the text it was
    embedded as) from the user's embedding cache, where the index keeps one."""
    forget = getattr(index, "forget_cached", None)
    if callable(forget):
        forget(namespace, [text_key(chunk.text), text_key(embedded_text(chunk))])


def recall_user(namespace: str) -> tuple[str, str] | None:
    """``(project_id, user_id)`` of a recall namespace (the inverse of
    :func:`~fastaiagent.facts.vectors.recall_namespace`), None for any other
    namespace (the semantic fact index's, ``default``)."""
    if namespace.startswith(_FACTS):
        parts = namespace[len(_FACTS) :].split(":")
        if len(parts) == 3 and parts[1] in SCOPES:
            return None
    if namespace.startswith(_USER):
        user = namespace[len(_USER) :]
        return ("", user) if user else None
    project, found, user = namespace.partition(":" + _USER)
    return (project, user) if found and project and user else None


def message_users(store: Any) -> list[MessageUser]:
    """Every user whose messages the store holds, with the count, by project then id."""
    counts: dict[tuple[str, str], int] = {}
    for index in _indexes(store):
        for namespace, count in index.namespace_counts().items():
            owner = recall_user(namespace)
            if owner is not None:
                counts[owner] = counts.get(owner, 0) + count
    return [MessageUser(user, project, n) for (project, user), n in sorted(counts.items()) if n]


__all__ = [
    "MessageUser",
    "StoredMessage",
    "count_messages",
    "delete_message",
    "list_messages",
    "message_users",
    "recall_user",
    "search_messages",
]
