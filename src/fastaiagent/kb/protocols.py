"""The VectorStore contract and the Chunk record every backend stores.

A chunk's namespace is ``metadata["namespace"]``; a chunk without one is
*untagged*. Searches name the namespace they want and backends filter on it
before ranking (a sub-index per namespace, or a server-side payload filter),
so a quiet namespace is never crowded out or slowed down by a busy one.
Scores are cosine similarities: backends normalise vectors themselves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from fastaiagent._validate import integer, positive_int
from fastaiagent._validate import text as check_text
from fastaiagent.errors import InvalidTypeError, InvalidValueError

NAMESPACE_KEY = "namespace"
UNTAGGED = ""  # the internal key of chunks with no namespace


@dataclass
class Chunk:
    """One stored text with its vector. ``id`` is unique within a store."""

    id: str
    text: str
    vector: list[float] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def namespace(self) -> str | None:
        """The namespace tag, or None for an untagged chunk."""
        value = self.metadata.get(NAMESPACE_KEY)
        return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class SearchHit:
    """A chunk found by a search, with its cosine similarity to the query."""

    chunk: Chunk
    score: float


class DimensionMismatchError(InvalidValueError):
    """A vector's length differs from the dimension of the index it goes to."""


@runtime_checkable
class VectorStore(Protocol):
    """Chunks with vectors, searchable by similarity within a namespace.

    Implementations are thread-safe. ``add`` upserts by id. ``dimension`` is
    None until fixed (by the constructor or the first ``add``); a vector of
    another length raises :class:`DimensionMismatchError`.
    """

    @property
    def dimension(self) -> int | None: ...

    def add(self, chunks: Sequence[Chunk]) -> None:
        """Insert or replace ``chunks`` (each needs a vector)."""
        ...

    def search(
        self, vector: Sequence[float], top_k: int = 5, *, namespace: str | None = None,
        include_untagged: bool = False,
    ) -> list[SearchHit]:
        """The ``top_k`` most similar chunks, best first.

        ``namespace=None`` searches every chunk. Otherwise only chunks tagged
        ``namespace`` (plus untagged ones when ``include_untagged``) are
        considered, and the filter is applied before ranking.
        """
        ...

    def get(self, ids: Sequence[str]) -> list[Chunk]:
        """The chunks with these ids that exist, in the order asked."""
        ...

    def chunks(self, namespace: str | None, *, include_untagged: bool = False) -> list[Chunk]:
        """Every chunk of a namespace (vectors may be omitted)."""
        ...

    def delete(self, ids: Sequence[str]) -> int:
        """Delete chunks by id; returns how many existed."""
        ...

    def delete_namespace(self, namespace: str) -> int:
        """Delete every chunk tagged ``namespace``; returns how many there were."""
        ...

    def count(self, namespace: str | None = None) -> int:
        """How many chunks the store (or one namespace) holds."""
        ...


class NamespacedSearch:
    """The one front of every shipped vector store: ``search``, ``delete``,
    ``delete_namespace`` and ``chunks`` check the request and hand the backend only
    what it must do itself.

    A store derives from it and implements its ``dimension``,
    :meth:`search_namespaces` (the public extension point for a store of your own)
    or :meth:`search_checked`, :meth:`delete_ids`, :meth:`delete_namespace_rows`
    and :meth:`read_namespaces` (or overrides the verbs it does differently).
    """

    @property
    def dimension(self) -> int | None:
        """The vector size (None until fixed)."""
        raise NotImplementedError

    def search(
        self, vector: Sequence[float], top_k: int = 5, *, namespace: str | None = None,
        include_untagged: bool = False,
    ) -> list[SearchHit]:
        """See :meth:`VectorStore.search`."""
        check_top_k(top_k)
        keys = wanted_keys(namespace, include_untagged)
        return [] if top_k == 0 else self.search_namespaces(vector, top_k, keys)

    def search_namespaces(
        self, vector: Sequence[float], top_k: int, keys: list[str] | None
    ) -> list[SearchHit]:
        """The backend's part of :meth:`search`: the ``top_k`` (>= 1) chunks filed under
        ``keys`` (namespace keys, :data:`UNTAGGED` among them; None: every chunk)
        closest to ``vector`` by cosine, best first. It checks ``vector`` against the
        store's dimension; an empty store answers []. This one does that and hands
        the rest to :meth:`search_checked`."""
        query = self.query_vector(vector)
        return [] if query is None else self.search_checked(query, top_k, keys)

    def search_checked(self, query: list[float], top_k: int, keys: list[str] | None) -> list[SearchHit]:
        """:meth:`search_namespaces` of a ``query`` of the store's dimension."""
        raise NotImplementedError

    def query_vector(self, vector: Sequence[float]) -> list[float] | None:
        """A search's ``vector`` checked against the store's dimension, as floats; None
        while the store has no dimension (it holds nothing: the search finds nothing)."""
        dimension = self.dimension
        return None if dimension is None else check_vector(vector, dimension, "query vector")

    def delete(self, ids: Sequence[str]) -> int:
        """See :meth:`VectorStore.delete`."""
        wanted = id_list(ids, "delete")
        return self.delete_ids(wanted) if wanted else 0

    def delete_ids(self, ids: list[str]) -> int:
        """The backend's part of :meth:`delete`: these ids (distinct, at least one)."""
        raise NotImplementedError

    def delete_namespace(self, namespace: str) -> int:
        """See :meth:`VectorStore.delete_namespace`."""
        return self.delete_namespace_rows(check_text("namespace", namespace))

    def delete_namespace_rows(self, namespace: str) -> int:
        """The backend's part of :meth:`delete_namespace` (a checked namespace)."""
        raise NotImplementedError

    def chunks(self, namespace: str | None, *, include_untagged: bool = False) -> list[Chunk]:
        """See :meth:`VectorStore.chunks`."""
        return self.read_namespaces(wanted_keys(namespace, include_untagged))

    def read_namespaces(self, keys: list[str] | None) -> list[Chunk]:
        """The backend's part of :meth:`chunks`: the chunks filed under ``keys`` (None: all)."""
        raise NotImplementedError


def namespace_key(metadata: dict[str, Any]) -> str:
    """The key a chunk is filed under: its namespace, or :data:`UNTAGGED`."""
    value = metadata.get(NAMESPACE_KEY)
    if value is None or value == "":
        return UNTAGGED
    if not isinstance(value, str):
        raise InvalidTypeError(f"metadata['namespace'] must be a str, got {type(value).__name__}")
    return value


def wanted_keys(namespace: str | None, include_untagged: bool) -> list[str] | None:
    """The namespace keys a search covers (None = all)."""
    if namespace is None:
        return None
    check_text("namespace", namespace)
    return [namespace, UNTAGGED] if include_untagged else [namespace]


def check_vector(vector: Sequence[float] | None, dimension: int | None, what: str) -> list[float]:
    """A finite vector of the expected length, as floats; raises otherwise."""
    if vector is None:
        raise InvalidValueError(f"{what} has no vector")
    values = list(map(float, vector))
    if dimension is not None and len(values) != dimension:
        raise DimensionMismatchError(
            f"{what} has dimension {len(values)} but the index has dimension {dimension}; "
            "use an embedder of the same size or a new index"
        )
    # nan/inf anywhere make the sum non-finite: one C-level pass instead of a Python loop
    # (a plain sum: fsum's exact rounding costs 4x, and raises OverflowError near 1e308).
    if not values or not math.isfinite(sum(values)):
        raise InvalidValueError(f"{what} must be a non-empty vector of finite numbers")
    return values


def check_chunk(chunk: Chunk, dimension: int | None) -> list[float]:
    """Validate a chunk for ``add``; returns its vector as floats."""
    if not isinstance(chunk, Chunk):
        raise InvalidTypeError(f"expected a Chunk, got {type(chunk).__name__}")
    check_text("Chunk.id", chunk.id)
    check_text("Chunk.text", chunk.text, allow_empty=True)
    if not isinstance(chunk.metadata, dict):
        raise InvalidTypeError("chunk metadata must be a dict")
    namespace_key(chunk.metadata)
    return check_vector(chunk.vector, dimension, f"chunk {chunk.id!r}")


@dataclass
class Batch:
    """The chunks of one ``add``, checked: one per id (the last written, in the place
    of the first), their vectors as floats, their namespace keys and their dimension
    (the store's when it had one)."""

    chunks: list[Chunk]
    vectors: list[list[float]]
    keys: list[str]
    dimension: int


def checked_batch(chunks: Sequence[Chunk], dimension: int | None) -> Batch | None:
    """Check the chunks of an ``add`` against ``dimension`` (None: the first vector
    fixes it); the last write wins for a repeated id. None when there are none. One
    Chunk is refused: ``add`` takes a list."""
    if isinstance(chunks, Chunk):
        raise InvalidTypeError("add() takes a list of chunks")
    latest: dict[str, tuple[Chunk, list[float]]] = {}
    for chunk in chunks:
        vector = check_chunk(chunk, dimension)
        dimension = dimension or len(vector)
        latest[chunk.id] = (chunk, vector)
    if not latest or dimension is None:
        return None
    items = list(latest.values())
    keys = [namespace_key(chunk.metadata) for chunk, _ in items]
    return Batch([chunk for chunk, _ in items], [vector for _, vector in items], keys, dimension)


class Dimension:
    """A store's rule for its vector size: ``asked`` by its constructor (checked; None:
    the first add fixes it), agreed with what its storage holds. ``instead`` ends
    the advice of its errors ("another table", "another collection")."""

    def __init__(self, asked: int | None, instead: str) -> None:
        self.asked = check_dimension(asked)
        self.instead = instead

    def agreed(self, stored: int | None, where: str) -> int | None:
        """The size of the store when its storage (``where``) holds ``stored`` (None:
        nothing yet); raises :class:`DimensionMismatchError` when it is not the one asked."""
        if stored is not None and self.asked is not None and stored != self.asked:
            raise DimensionMismatchError(
                f"{where} has dimension {stored}, but dimension={self.asked} was asked; use "
                f"an embedder of that size or {self.instead}"
            )
        return stored if stored is not None else self.asked

    def refused(self, size: int, stored: int | None) -> DimensionMismatchError:
        """The error of vectors of ``size`` written to storage of dimension ``stored``."""
        return DimensionMismatchError(
            f"vectors have dimension {size} but the index has dimension {stored}; use an "
            f"embedder of the same size or {self.instead}"
        )


def id_list(ids: Sequence[str], verb: str) -> list[str]:
    """The ids given to ``verb`` (``"get"``, ``"delete"``), in order without repeats.
    One str is refused: iterating it would read its characters as ids."""
    if isinstance(ids, str):
        raise InvalidTypeError(f"{verb}() takes a list of ids, not one str")
    return list(dict.fromkeys(ids))


def check_top_k(top_k: int) -> None:
    """``top_k`` for a search: an int >= 0 (0 asks for nothing)."""
    integer("top_k", top_k, minimum=0)


def check_dimension(dimension: int | None) -> int | None:
    """A store's ``dimension``: None (learnt from the first add) or an int >= 1."""
    return positive_int("dimension", dimension, allow_none=True)
