"""SemanticFactIndex: search a subject's durable facts by meaning.

The FactStore is the source of truth; the vector index is derived and may be
empty (a restarted process) or behind (facts written by another process).
So before searching a subject, its active facts are read from the store, the
ones the index lacks are embedded in one batch, and the ones no longer
active (superseded or forgotten) leave the index. A full read costs what the
subject holds (~100 ms for 10k facts in SQLite), so it runs on the subject's
first search in a process and then every ``full_sync_seconds``; between
those, each search reads the newest facts (new writes are the newest) and
re-reads every fact it returns from the store, so a superseded or deleted
fact is never returned.

Each subject (scope, scope_id, project_id) has its own namespace in the
vector store, so a search reads one subject's vectors only. Vector ids are
uuid5s of the store identity and fact id (stable across processes, valid
Qdrant point ids); the fact id is kept in the chunk metadata.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from fastaiagent._validate import fraction, number, one_of, positive_int
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.index.embedding_cache import EMBEDDER_KEY, cached, identity_of
from fastaiagent.facts.index.reembed import foreign, reembed_in_background, stop_background_job
from fastaiagent.facts.scoping import check_limit, delete_selector, read_selector
from fastaiagent.facts.store import FactStore
from fastaiagent.kb.bm25 import BM25Index
from fastaiagent.kb.hybrid import DEFAULT_DENSE_WEIGHT
from fastaiagent.kb.protocols import NAMESPACE_KEY, Chunk, DimensionMismatchError, VectorStore

_UUID_NAMESPACE = uuid.UUID("a3c1f6de-2b9e-5d47-8e0a-4f6b1c2d9e37")
_DURABLE_PREFIX = "fact:"
CHUNKS_KEPT = 512
"""Chunks (a fact's text and time) kept per subject between searches: a keyword hit the
dense side did not return is then not read again (a fact's text never changes)."""
Subject = tuple[str, str, str]  # (scope, scope_id, project_id)


def is_stored_index(vectors: Any) -> bool:
    """True for a :class:`~fastaiagent.facts.vectors.StoredVectorIndex` (durable vectors,
    keyword postings, chunk ids and an embedding cache in the fact store)."""
    return all(
        callable(getattr(vectors, name, None))
        for name in ("keyword_search", "ids", "cached_embeddings", "cache_embeddings")
    )


def store_identity(store: Any) -> str:
    """A string naming the fact store, so two stores' fact #1 get different vector ids."""
    explicit = getattr(store, "identity", None)
    if isinstance(explicit, str) and explicit:
        return explicit
    for attr in ("path", "url", "dsn", "namespace", "prefix"):
        value = getattr(store, attr, None)
        if value:
            return f"{type(store).__name__}:{value}"
    return type(store).__name__


@functools.lru_cache(maxsize=4096)
def subject_namespace(subject: Subject) -> str:
    """The vector namespace of one subject (parts escaped so ids with ':' cannot collide)."""
    scope, scope_id, project_id = subject
    return "facts:" + ":".join(quote(part, safe="") for part in (project_id, scope, scope_id))


@dataclass
class _SubjectIndex:
    """What the vector store holds for one subject: fact id -> vector id, plus keywords."""

    fact_to_vector: dict[int, str] = field(default_factory=dict)
    vector_to_fact: dict[str, int] = field(default_factory=dict)
    keywords: BM25Index = field(default_factory=BM25Index)
    synced_at: float | None = None  # monotonic time of the last full read
    loaded: bool = False  # what the vector store already held has been read
    chunks: dict[str, Chunk] = field(default_factory=dict)  # seen hits, oldest first (CHUNKS_KEPT)
    # One lock per subject: a 10k-fact backfill of one user must not stall the others.
    lock: threading.RLock = field(default_factory=threading.RLock)


@dataclass
class FactHits:
    """What the sides of a :class:`SemanticFactIndex` found for one query, by vector id."""

    chunks: dict[str, Chunk] = field(default_factory=dict)
    """Every hit's chunk (its text; ``metadata["created_at"]``: when the fact was recorded)."""
    dense: list[tuple[str, float]] = field(default_factory=list)
    """Cosine similarity, best first."""
    keyword: list[tuple[str, float]] = field(default_factory=list)
    """BM25 score (none with ``retrieval="dense"``)."""
    keyword_complete: bool = False
    """Every fact holding a query term is in :attr:`keyword`."""
    owners: dict[str, tuple[Subject, int]] = field(default_factory=dict)
    """Each hit's subject and fact id."""


class SemanticFactIndex:
    """Search facts by meaning, backed by a VectorStore that mirrors the FactStore.

    ``vectors="auto"`` builds an in-process FAISS index sized to the embedder.
    ``embedder=None`` resolves ``"auto"`` on first use. ``retrieval`` is
    ``"hybrid"`` (dense + BM25, the default) or ``"dense"``.
    ``full_sync_seconds`` bounds how long the index may go without a full
    read of a subject's facts (0 = a full read before every search).
    """

    def __init__(
        self,
        store: FactStore,
        vectors: VectorStore | str = "auto",
        embedder: Any = None,
        *,
        retrieval: str = "hybrid",
        dense_weight: float = DEFAULT_DENSE_WEIGHT,
        full_sync_seconds: float = 60.0,
        head_size: int = 32,
    ) -> None:
        if isinstance(vectors, str) and vectors != "auto":
            raise InvalidValueError(f'vectors must be "auto" or a VectorStore, got {vectors!r}')
        if not isinstance(vectors, str) and not callable(getattr(vectors, "search", None)):
            raise InvalidTypeError(f"vectors must be a VectorStore, got {type(vectors).__name__}")
        one_of("retrieval", retrieval, ("hybrid", "dense"))
        number("full_sync_seconds", full_sync_seconds, minimum=0)
        positive_int("head_size", head_size)
        fraction("dense_weight", dense_weight)
        self.store = store
        self.full_sync_seconds = full_sync_seconds
        self.head_size = head_size
        self.retrieval = retrieval
        self.dense_weight = dense_weight
        self._vectors: VectorStore | None = None if isinstance(vectors, str) else vectors
        # A store-backed index lives in the fact store's own database: it holds the
        # vectors and keywords across restarts, so nothing is rebuilt or re-embedded.
        self.durable = is_stored_index(self._vectors)
        self._embedder_spec = embedder
        self._embedder: Any = None if embedder is None or isinstance(embedder, str) else embedder
        self._identity: str | None = None
        self._subjects: dict[str, _SubjectIndex] = {}
        self._lock = threading.RLock()

    # -- lazily resolved parts ------------------------------------------------

    @property
    def embedder(self) -> Any:
        """The embedder; ``"auto"`` is resolved on first use."""
        if self._embedder is None:
            from fastaiagent.kb.embedding import get_embedder

            self._embedder = get_embedder(self._embedder_spec or "auto")
        return self._embedder

    @property
    def vectors(self) -> VectorStore:
        """The vector store (``"auto"``: in-process FAISS made on first use), checked
        against the embedder's dimension."""
        if self._vectors is None:
            from fastaiagent.kb.backends.faiss import FaissVectorStore

            self._vectors = FaissVectorStore(dimension=self.embedder.dimension)
        dim = getattr(self._vectors, "dimension", None)
        if dim is not None and dim != self.embedder.dimension:
            raise DimensionMismatchError(
                f"the embedder makes {self.embedder.dimension}-dimensional vectors but the "
                f"vector store holds {dim}-dimensional ones; use a matching embedder or a new index"
            )
        return self._vectors

    @property
    def vectors_if_made(self) -> VectorStore | None:
        """The vector store when one was given or made (never makes one)."""
        return self._vectors

    def holds(self, scope: str, scope_id: str, project_id: str = "") -> bool:
        """True when this index may hold vectors of the subject (a cheap check
        before looking up which facts a forget must take out of it)."""
        namespace = subject_namespace((scope, scope_id, project_id))
        with self._lock:
            if namespace in self._subjects:
                return True
        return self._vectors is not None and self._vectors.count(namespace) > 0

    def vector_id(self, fact_id: int) -> str:
        """The stable vector id of a fact of this store."""
        if self.durable:  # same database as the facts: the fact id is unique already
            return f"{_DURABLE_PREFIX}{fact_id}"
        if self._identity is None:
            self._identity = store_identity(self.store)
        return str(uuid.uuid5(_UUID_NAMESPACE, f"{self._identity}#{fact_id}"))

    # -- index maintenance -----------------------------------------------------

    def _state(self, namespace: str) -> _SubjectIndex:
        with self._lock:
            state = self._subjects.get(namespace)
            if state is None:
                state = self._subjects[namespace] = _SubjectIndex()
        with state.lock:
            if not state.loaded and self.durable:
                self._load_durable(namespace, state)
            elif not state.loaded:
                # First touch of this subject in this process: learn what a shared
                # (or persistent) vector store already holds for it.
                for chunk in self.vectors.chunks(namespace):
                    fact_id = chunk.metadata.get("fact_id")
                    if isinstance(fact_id, int):
                        state.fact_to_vector[fact_id] = chunk.id
                        state.vector_to_fact[chunk.id] = fact_id
                        state.keywords.add(chunk.id, chunk.text)
                state.loaded = True
        return state

    def _load_durable(self, namespace: str, state: _SubjectIndex) -> None:
        """What a store-backed index holds for a subject: its ids only (the fact id is
        in the vector id). Vectors of another embedder stay until re-embedded in the
        background; searches leave them out meanwhile (:meth:`_own_model`)."""
        held = self.vectors.ids(namespace)  # type: ignore[attr-defined]
        for vector_id in held:
            if vector_id.startswith(_DURABLE_PREFIX) and vector_id[len(_DURABLE_PREFIX):].isdigit():
                state.fact_to_vector[int(vector_id[len(_DURABLE_PREFIX):])] = vector_id
                state.vector_to_fact[vector_id] = int(vector_id[len(_DURABLE_PREFIX):])
        state.loaded = True

    def _embedder_for(self, namespace: str) -> Any:
        return cached(self.embedder, self._vectors, namespace) if self.durable else self.embedder

    def _add(self, namespace: str, state: _SubjectIndex, facts: Sequence[Fact]) -> None:
        if not facts:
            return
        vectors = self._embedder_for(namespace).embed([f.fact for f in facts])
        chunks = [
            Chunk(
                id=self.vector_id(int(f.id)),  # type: ignore[arg-type]
                text=f.fact,
                vector=list(v),
                metadata={
                    NAMESPACE_KEY: namespace,
                    "fact_id": f.id,
                    "scope": f.scope,
                    "scope_id": f.scope_id,
                    "project_id": f.project_id,
                    "created_at": f.created_at,  # for recall's time cues
                    **({EMBEDDER_KEY: identity_of(self.embedder)} if self.durable else {}),
                },
            )
            for f, v in zip(facts, vectors, strict=True)
        ]
        self.vectors.add(chunks)
        for fact, chunk in zip(facts, chunks, strict=True):
            state.fact_to_vector[int(fact.id)] = chunk.id  # type: ignore[arg-type]
            state.vector_to_fact[chunk.id] = int(fact.id)  # type: ignore[arg-type]
            if not self.durable:  # the store keeps its own keyword postings
                state.keywords.add(chunk.id, chunk.text)

    def _drop(self, state: _SubjectIndex, fact_ids: Iterable[int]) -> None:
        vector_ids = [
            state.fact_to_vector.pop(i) for i in list(fact_ids) if i in state.fact_to_vector
        ]
        if vector_ids:
            self.vectors.delete(vector_ids)
            for vector_id in vector_ids:
                state.vector_to_fact.pop(vector_id, None)
                state.chunks.pop(vector_id, None)
                if not self.durable:
                    state.keywords.remove(vector_id)

    def _sync(self, subject: Subject, active: Sequence[Fact]) -> _SubjectIndex:
        """Make the subject's index match its active facts (one embedding batch)."""
        namespace = subject_namespace(subject)
        state = self._state(namespace)
        with state.lock:
            active_ids = {f.id for f in active}
            stale = [i for i in state.fact_to_vector if i not in active_ids]
            self._drop(state, stale)
            self._add(namespace, state, [f for f in active if f.id not in state.fact_to_vector])
        return state

    def index(self, facts: Iterable[Fact]) -> int:
        """Embed and index stored facts (those with an id) the index lacks; returns how many."""
        by_subject: dict[Subject, list[Fact]] = {}
        for fact in facts:
            if fact.id is not None and fact.active:
                by_subject.setdefault((fact.scope, fact.scope_id, fact.project_id), []).append(fact)
        added = 0
        for subject, items in by_subject.items():
            namespace = subject_namespace(subject)
            state = self._state(namespace)
            with state.lock:
                new = [f for f in items if f.id not in state.fact_to_vector]
                self._add(namespace, state, new)
            added += len(new)
        return added

    def remove(self, fact_ids: Iterable[int]) -> int:
        """Drop these facts' vectors (e.g. after a supersede); returns how many were indexed."""
        ids = set(fact_ids)
        removed = 0
        with self._lock:
            states = list(self._subjects.values())
        for state in states:
            with state.lock:
                hit = ids.intersection(state.fact_to_vector)
                removed += len(hit)
                self._drop(state, hit)
        # Vectors written by another process for subjects this one never touched.
        leftovers = [self.vector_id(i) for i in ids]
        if self._vectors is not None and leftovers:  # a delete needs no embedder
            removed += self._vectors.delete(leftovers)
        return removed

    def forget(self, scope: str, scope_id: str, project_id: str = "") -> int:
        """Delete a subject's vectors (``"*"``: every subject this process knows); returns the count."""
        selector = delete_selector(scope, scope_id, project_id)
        with self._lock:
            if selector.scope_id is not None:
                namespaces = [subject_namespace((scope, selector.scope_id, project_id))]
            else:
                prefix = subject_namespace((scope, "", project_id))
                namespaces = [ns for ns in self._subjects if ns.startswith(prefix)]
            for namespace in namespaces:
                self._subjects.pop(namespace, None)
        vectors = self._vectors
        if vectors is None:  # the in-process index was never made: nothing of theirs in it
            return 0
        for namespace in namespaces:
            stop_background_job(vectors, namespace)  # it must not write back
        return sum(vectors.delete_namespace(namespace) for namespace in namespaces)

    # -- search ------------------------------------------------------------------

    def find(
        self, query: str, scope: str, scope_id: str, project_id: str = "", fetch: int = 40
    ) -> FactHits:
        """What each side finds for ``query`` among the subject's facts (``fetch`` from
        each side; recall asks for its fetch factor times the facts wanted), for recall
        to rank (:mod:`fastaiagent.recall.facts`); the index is brought up to date first.

        An empty id at user/project scope finds nothing (never another user's
        facts); ``"*"`` searches every subject of the scope (a full read). The
        index holds expired facts too (they may be asked for): :meth:`verified`
        leaves them out.
        """
        if not isinstance(query, str):
            raise InvalidTypeError(f"query must be a str, got {type(query).__name__}")
        check_limit(fetch)
        selector = read_selector(scope, scope_id, project_id)
        if selector is None or not query.strip() or fetch == 0:
            return FactHits()
        if selector.scope_id is None:
            subjects = self._sync_all(scope, scope_id, project_id)
        else:
            subject = (scope, selector.scope_id, project_id)
            subjects = [subject] if self._sync_subject(subject) else []
        if not subjects:
            return FactHits()
        # Outside every lock: the slow part. One subject's query is cached with its facts.
        embedder = self._embedder_for(subject_namespace(subjects[0])) if len(subjects) == 1 else self.embedder
        query_vector = embedder.embed([query])[0]
        found = FactHits(keyword_complete=True)
        for subject in subjects:
            state = self._subjects.get(subject_namespace(subject))
            if state is None:  # forgotten while the query was being embedded
                continue
            with state.lock:
                self._find_in(subject, state, query, query_vector, fetch, found)
        found.dense.sort(key=lambda hit: hit[1], reverse=True)  # several subjects: one order
        return found

    def _sync_subject(self, subject: Subject) -> bool:
        """Bring one subject's index up to date with the store; False when it has no facts.

        A full read of the subject's active facts happens on its first search
        in this process and every ``full_sync_seconds``; in between, reading
        the newest ``head_size`` facts finds new writes (new facts are the
        newest), and :meth:`_verified` catches superseded or deleted ones.
        """
        namespace = subject_namespace(subject)
        state = self._state(namespace)
        with state.lock:
            now = time.monotonic()
            if state.synced_at is None and self.durable and state.fact_to_vector:
                # The store already holds this subject's vectors (another process or an
                # earlier run indexed them): reading the head finds what is new, so a
                # restart costs no full read of the subject.
                state.synced_at = now
            if state.synced_at is None or now - state.synced_at >= self.full_sync_seconds:
                return self._full_sync(subject, state, now)
            head = self.store.list_active(*subject, limit=self.head_size, include_expired=True)
            unknown = [f for f in head if f.id not in state.fact_to_vector]
            if len(unknown) == self.head_size:  # more may hide past the head
                return self._full_sync(subject, state, now)
            self._add(namespace, state, unknown)
            return bool(state.fact_to_vector)

    def _full_sync(self, subject: Subject, state: _SubjectIndex, now: float) -> bool:
        active = self.store.list_active(*subject, limit=None, include_expired=True)
        self._sync(subject, active)
        state.synced_at = now
        return bool(active)

    def _sync_all(self, scope: str, scope_id: str, project_id: str) -> list[Subject]:
        active = self.store.list_active(scope, scope_id, project_id, limit=None, include_expired=True)
        by_subject: dict[Subject, list[Fact]] = {}
        for fact in active:
            by_subject.setdefault((fact.scope, fact.scope_id, fact.project_id), []).append(fact)
        for subject, facts in by_subject.items():
            self._sync(subject, facts)
        return list(by_subject)

    def verified(self, ranked: Iterable[tuple[Subject, int]], limit: int, when: float | None) -> list[Fact]:
        """The store's current rows for the best hits; stale vectors are dropped on the way.

        The index may lag the store (another process superseded or deleted a
        fact), so every returned fact is read back and must still be active
        and belong to the subject searched.
        """
        out: list[Fact] = []
        for subject, fact_id, fact in self._read_back(ranked, limit, out):
            if (
                fact is None
                or not fact.active
                or (fact.scope, fact.scope_id, fact.project_id) != subject
            ):
                state = self._subjects.get(subject_namespace(subject))
                if state is not None:
                    with state.lock:
                        self._drop(state, [fact_id])
                        state.synced_at = None  # changed behind our back: full read next
                continue
            if when is not None and not fact.valid_at(when):
                continue  # expired (or not yet valid): kept in the index, not returned
            out.append(fact)
            if len(out) == limit:
                break
        return out

    def _read_back(
        self, ranked: Iterable[tuple[Subject, int]], limit: int, out: list[Fact]
    ) -> Iterator[tuple[Subject, int, Fact | None]]:
        """Each hit with the store's row, read as many at once as ``out`` still wants
        (one statement where the store reads several ids at once: ``get_many``)."""
        get_many = getattr(self.store, "get_many", None)
        if get_many is None:
            yield from ((subject, fact_id, self.store.get(fact_id)) for subject, fact_id in ranked)
            return
        hits = iter(ranked)
        while batch := list(itertools.islice(hits, max(1, limit - len(out)))):
            rows = get_many([fact_id for _, fact_id in batch])
            yield from ((subject, fact_id, rows.get(fact_id)) for subject, fact_id in batch)

    def _own_model(self, hits: list[Any], namespace: str) -> list[Any]:
        """The hits embedded by this index's embedder; vectors of an earlier model are
        left out of the ranking and re-embedded in the background (facts/index/reembed.py)."""
        identity = identity_of(self.embedder)
        kept = [h for h in hits if not foreign(h.chunk.metadata, identity)]
        if len(kept) < len(hits):
            reembed_in_background(self.vectors, self.embedder, namespace)
        return kept

    def _find_in(
        self,
        subject: Subject,
        state: _SubjectIndex,
        query: str,
        query_vector: Sequence[float],
        fetch: int,
        found: FactHits,
    ) -> None:
        """Add what each side finds among one subject's facts to ``found``."""
        namespace = subject_namespace(subject)
        hits = self.vectors.search(query_vector, fetch, namespace=namespace)
        if self.durable:
            hits = self._own_model(hits, namespace)
        keyword: list[tuple[str, float]] = []
        if self.retrieval == "hybrid" and self.durable:
            keyword = self.vectors.keyword_search(query, fetch, namespace=namespace)  # type: ignore[attr-defined]
        elif self.retrieval == "hybrid":
            keyword = state.keywords.search(query, fetch)
        known, kept, chunks, owners = state.vector_to_fact, state.chunks, found.chunks, found.owners
        for hit in hits:
            chunk = hit.chunk
            if (fact_id := known.get(chunk.id)) is not None:
                chunks[chunk.id] = kept[chunk.id] = chunk
                owners[chunk.id] = (subject, fact_id)
                found.dense.append((chunk.id, hit.score))
        keyword = [(i, score) for i, score in keyword if i in known]
        unread = []
        for i, _ in keyword:
            if i not in chunks:
                if (held := kept.get(i)) is None:
                    unread.append(i)
                else:
                    chunks[i], owners[i] = held, (subject, known[i])
        if unread:
            for chunk in self.vectors.get(unread):
                if chunk.id in known:
                    chunks[chunk.id] = kept[chunk.id] = chunk
                    owners[chunk.id] = (subject, known[chunk.id])
        while len(kept) > CHUNKS_KEPT:
            del kept[next(iter(kept))]
        found.keyword.extend((i, score) for i, score in keyword if i in chunks)
        found.keyword_complete = found.keyword_complete and len(keyword) < fetch
