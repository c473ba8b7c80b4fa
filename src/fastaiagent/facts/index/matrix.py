"""Namespace matrices: one namespace's unit vectors in memory, the copies an index
holds (within a byte budget), and how a store's report of what changed brings a
copy up to date.

The SQLite, Postgres and Redis vector indexes keep each searched namespace's
vectors as one :class:`NamespaceMatrix` and check it against the store before a
search: the backend reads what changed since the copy's marker and reports it as
a :class:`Change` (nothing, the rows written or removed since, or the whole
namespace); :class:`NamespaceCopies` applies it. Growing, masking, compacting and
ranking a matrix happen here, once; a backend persists rows and reports changes.

A reader takes a :class:`MatrixView` under the copies' lock and ranks outside it:
rows are written before the matrix counts them, a removed row is only masked, and
a compaction makes a new matrix, so a view stays valid while its copy moves on.
numpy is imported where it is used: the indexes ``require`` it first, with the
extra that brings it.

The copies of every index made without a ``cache_bytes`` of its own are held in
one cache for the whole process, :data:`CACHE_BYTES` in all (docs/production.md,
"What a process keeps"): a process with several stores, or indexes of several
vector sizes, holds no more than one alone would.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from fastaiagent._heap import freed
from fastaiagent.facts.index.sketch import BUILDER, SHORTLIST, SKETCH_FROM, Sketch, SketchView

# What a row's key costs as Python holds it: its slot in ``keys``, the key (a row
# number or an id) and its entry in ``where`` (measured ~90-150 bytes).
KEY_BYTES = 100

CACHE_BYTES = 256 * 2**20
"""The bytes of namespace copies this process holds, every index's together (those
made without a ``cache_bytes`` of their own), least recently searched out first.
A module value read at every put: ``fastaiagent.facts.index.matrix.CACHE_BYTES = ...``."""

TOO_BIG_HELD = 1024  # namespaces remembered as larger than the budget (then forgotten all at once)


class Sized(Protocol):
    """What the cache measures: the bytes an item holds."""

    @property
    def nbytes(self) -> int: ...


M = TypeVar("M", bound=Sized)


class MatrixCache(Generic[M]):
    """Items by key, least recently used first out, at most ``limit`` bytes in all
    (None: :data:`CACHE_BYTES`, read at every put).

    An item's size is read when it is put, so an item grown in place is
    measured again by putting it again. An item larger than the whole limit is
    not kept (it is searched from a fresh read each time) unless ``keep_newest``
    (the cache's, or the put's): then the item put last is always kept, whatever
    its size. Not thread-safe: :class:`NamespaceCopies` calls it under its lock."""

    def __init__(self, limit: int | None, *, keep_newest: bool = False) -> None:
        self._limit = limit
        self.keep_newest = keep_newest
        self._items: OrderedDict[Hashable, tuple[M, int]] = OrderedDict()
        self._held = 0  # bytes of the items, as measured when each was put

    @property
    def limit(self) -> int:
        """The budget in bytes now."""
        return CACHE_BYTES if self._limit is None else self._limit

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    @property
    def held(self) -> int:
        """Bytes held, as measured when each item was put."""
        return self._held

    def get(self, key: Hashable) -> M | None:
        """The item of ``key`` (its place in the eviction order unchanged), else None."""
        entry = self._items.get(key)
        return entry[0] if entry is not None else None

    def touch(self, key: Hashable) -> None:
        """Mark ``key`` as just used: it is evicted last."""
        if key in self._items:
            self._items.move_to_end(key)

    def put(self, key: Hashable, item: M, *, keep_newest: bool | None = None) -> bool:
        """Hold ``item`` as the most recently used, evicting the least recently used
        beyond the limit; False (and nothing held for ``key``) when ``item`` alone
        is larger than the limit (and not ``keep_newest``)."""
        self.pop(key)
        size, limit = int(item.nbytes), self.limit
        if size > limit and not (self.keep_newest if keep_newest is None else keep_newest):
            return False
        self._items[key] = (item, size)
        self._held += size
        while self._held > limit and len(self._items) > 1:
            _, (_, evicted) = self._items.popitem(last=False)
            self._held -= evicted
            freed(evicted)  # glibc keeps what a copy frees: trimmed now and then
        return True

    def pop(self, key: Hashable) -> None:
        """Forget ``key``'s item, if held."""
        entry = self._items.pop(key, None)
        if entry is not None:
            self._held -= entry[1]

    def clear(self) -> None:
        self._items.clear()
        self._held = 0

    def pop_where(self, test: Callable[[Hashable], bool]) -> None:
        """Forget the items whose key passes ``test``."""
        for key in [key for key in self._items if test(key)]:
            self.pop(key)


def unit_rows(vectors: Any, *, in_place: bool = False) -> Any:
    """``vectors`` (rows) as a float32 matrix of unit rows; a zero row stays zero
    (it scores 0 against anything). A row already of unit length (to float32's
    precision) is kept bit for bit, so vectors copied between stores stay the same.
    ``in_place``: ``vectors`` is a writeable float32 matrix made for the caller,
    rescaled where needed instead of copied (a cold read of a 100k namespace
    saves a 150 MB copy)."""
    import numpy as np

    owned = in_place and isinstance(vectors, np.ndarray) and vectors.ndim == 2
    if owned and vectors.dtype == np.float32 and vectors.flags.writeable:
        matrix = vectors
    else:
        matrix = np.array(vectors, dtype=np.float32, ndmin=2)
    # einsum: no temporary the size of the matrix (norm() squares into a fresh one)
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
    off = np.flatnonzero((norms > 0) & (np.abs(norms - 1.0) > 1e-6))
    if len(off):
        matrix[off] /= norms[off, None]
    return matrix


def unit_vector(vector: Sequence[float]) -> Any:
    """One vector as float32, L2-normalised (a zero vector stays zero)."""
    import numpy as np

    query = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(query))
    return query / norm if norm > 0 else query


Scored = tuple[float, Hashable]  # (cosine, row key)


class MatrixView(NamedTuple):
    """Rows ``[0, len(vectors))`` of a namespace as a search reads them.

    ``keys`` may be the matrix's own list, which only grows (rows past the view
    are not read); ``alive`` masks removed rows (None: none are); ``where`` maps a
    key to its row (None: built when :meth:`among` needs it); ``sketch`` projects
    its first rows (see :mod:`~fastaiagent.facts.index.sketch`)."""

    keys: Sequence[Hashable]
    vectors: Any
    alive: Any = None
    where: Mapping[Hashable, int] | None = None
    sketch: SketchView | None = None

    def top(self, query: Any, top_k: int) -> list[Scored]:
        """The ``top_k`` best ``(cosine, key)`` of the view, in no order."""
        import numpy as np

        count = len(self.vectors)
        if count == 0:
            return []
        if self.sketch is not None:
            return self._shortlisted(query, top_k)
        # einsum runs in the calling thread. BLAS (``@``) wakes its thread pool: a
        # threaded matvec stalls for ms whenever another process holds a core
        # (measured 9 ms vs 0.4 ms p50 at 10k x 384 on 2 busy cores).
        scores = np.einsum("ij,j->i", self.vectors, query)
        if self.alive is not None:  # rows removed since, not yet compacted away
            scores[~self.alive] = -np.inf
        picked = np.argpartition(-scores, top_k - 1)[:top_k] if count > top_k else range(count)
        keys = self.keys
        return [(float(scores[i]), keys[i]) for i in picked if scores[i] > -np.inf]

    def _shortlisted(self, query: Any, top_k: int) -> list[Scored]:
        """:meth:`top` scoring exactly only the rows the sketch cannot rule out (and
        the rows appended after it was taken)."""
        import numpy as np

        assert self.sketch is not None
        count, sketched = len(self.vectors), len(self.sketch.rows)
        want = min(max(SHORTLIST, 16 * top_k), sketched)
        rows, scores = self.sketch.ranked(self.vectors, query, self.alive, top_k, want)
        if count > sketched:
            tail = np.arange(sketched, count)
            scores = np.concatenate([scores, np.einsum("ij,j->i", self.vectors[tail], query)])
            if self.alive is not None:
                scores[len(rows) :][~self.alive[tail]] = -np.inf
            rows = np.concatenate([rows, tail])
        picked = np.argpartition(-scores, top_k - 1)[:top_k] if len(rows) > top_k else range(len(rows))
        keys = self.keys
        return [(float(scores[i]), keys[rows[i]]) for i in picked if scores[i] > -np.inf]

    def among(self, wanted: Sequence[Hashable], query: Any) -> list[Scored]:
        """``(cosine, key)`` of the rows of ``wanted`` the view holds (alive)."""
        import numpy as np

        count = len(self.vectors)
        where = self.where if self.where is not None else {k: r for r, k in enumerate(self.keys)}
        rows = [row for key in wanted if (row := where.get(key, count)) < count]
        if self.alive is not None:
            rows = [row for row in rows if self.alive[row]]
        if not rows:
            return []
        scores = np.einsum("ij,j->i", self.vectors[rows], query)
        return [(float(score), self.keys[row]) for row, score in zip(rows, scores, strict=True)]


class NamespaceMatrix:
    """One namespace's unit vectors: rows ``[0, n)`` of ``buffer``, the row of
    ``keys[row]`` (a store's row id or chunk id); a removed row is masked out
    (``alive``) until :meth:`compacted`.

    ``version`` and ``epoch`` are the store's change markers this copy reflects
    (a backend with one marker leaves ``epoch`` at 0). Rows are appended in the
    order given, with 1/8 headroom (not doubling: a 100k x 384 namespace is
    150 MB already), at least 16 rows (a new user's few messages do not hold
    the room of 64)."""

    def __init__(self, dimension: int, version: int = 0, epoch: int = 0) -> None:
        import numpy as np

        self.version, self.epoch = version, epoch
        self.buffer = np.empty((0, dimension), dtype=np.float32)
        self.alive = np.ones(0, dtype=bool)
        self.keys: list[Hashable] = []
        self.where: dict[Hashable, int] = {}
        self.n = 0
        self.dead = 0
        self.sketch: Sketch | None = None
        self.sketching = False  # a sketch was asked for (built, building, or not worth it)
        self.rewrites = 0  # rows replaced in place: a sketch fitted meanwhile is stale

    @property
    def nbytes(self) -> int:
        held = self.buffer.nbytes + self.alive.nbytes + KEY_BYTES * len(self.buffer)
        return int(held + (self.sketch.nbytes if self.sketch is not None else 0))

    def view(self) -> MatrixView:
        """Rows ``[0, n)``, with the mask only when a row is masked."""
        n = self.n
        alive = self.alive[:n] if self.dead else None
        sketch = self.sketch.view() if self.sketch is not None else None
        if sketch is not None and len(sketch.rows) > n:  # projected before being counted
            sketch = SketchView(sketch.basis, sketch.rows[:n], sketch.residual[:n])
        return MatrixView(self.keys, self.buffer[:n], alive, self.where, sketch)

    def last_key(self, default: Any) -> Any:
        """The key of the last row (``default`` when there is none)."""
        return self.keys[self.n - 1] if self.n else default

    def append(self, keys: Sequence[Hashable], vectors: Any) -> None:
        """Rows for new ``keys`` (unique, none held) after the others."""
        import numpy as np

        n, need = self.n, self.n + len(keys)
        if need > len(self.buffer):
            capacity = need + max(need // 8, 16)
            buffer = np.empty((capacity, self.buffer.shape[1]), dtype=np.float32)
            buffer[:n] = self.buffer[:n]
            alive = np.ones(capacity, dtype=bool)
            alive[:n] = self.alive[:n]
            self.buffer, self.alive = buffer, alive
        self.buffer[n:need] = vectors  # written before the rows are counted
        if self.sketch is not None:
            self.sketch.extend(self.buffer[n:need])
        self.keys.extend(keys)
        self.where.update(zip(keys, range(n, need), strict=True))
        self.n = need

    def upsert(self, keys: Sequence[Hashable], vectors: Any) -> None:
        """The row of a held key replaced in place, the others appended (``keys`` unique)."""
        where = self.where
        fresh = [i for i, key in enumerate(keys) if key not in where]
        if len(fresh) < len(keys):
            for i, key in enumerate(keys):
                row = where.get(key)
                if row is not None:
                    self.buffer[row] = vectors[i]
                    self.rewrites += 1
                    if self.sketch is not None:
                        self.sketch.replace(row, self.buffer[row])
            self.append([keys[i] for i in fresh], vectors[fresh])
        else:
            self.append(keys, vectors)

    def remove(self, keys: Sequence[Hashable]) -> None:
        """Mask the rows of ``keys`` (keys not held are ignored)."""
        for key in keys:
            row = self.where.pop(key, None)
            if row is not None:
                self.alive[row] = False
                self.dead += 1

    def compacted(self) -> NamespaceMatrix:
        """This matrix without its masked rows once they are a fifth of it (a new
        copy: readers keep theirs), else itself."""
        import numpy as np

        if self.dead * 4 <= self.n:
            return self
        kept = np.flatnonzero(self.alive[: self.n])
        fresh = NamespaceMatrix(self.buffer.shape[1], self.version, self.epoch)
        fresh.append([self.keys[row] for row in kept], self.buffer[kept])
        if self.sketch is not None and self.sketch.n == self.n:
            fresh.sketch, fresh.sketching = self.sketch.subset(kept), True
        return fresh


@dataclass
class Change:
    """What a store reports of a namespace: the markers it is at and, from the
    copy at ``since`` (None: from nothing, the rows are the whole namespace), the
    rows written (``keys``, unit ``vectors``: a float32 matrix, of shape
    ``(0, dimension)`` for an empty whole namespace) and the keys removed.

    A whole namespace's ``vectors`` (and ``keys``, a list) become the copy's own
    when they are a writeable float32 matrix (one made for it, such as
    :func:`unit_rows` makes); read-only ones (a view of the store's bytes) are
    copied, with room to grow."""

    version: int
    epoch: int = 0
    since: int | None = None
    keys: Sequence[Hashable] = ()
    vectors: Any = None
    removed: Sequence[Hashable] = ()


Report = Callable[[NamespaceMatrix | None], Change | None]


class _Shared:
    """The cache the copies of every index without a budget of its own share."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cache: MatrixCache[NamespaceMatrix] = MatrixCache(None)
        self.orphans: list[object] = []  # owners of indexes collected, copies not yet dropped

    def drop_orphans(self) -> None:
        """Drop the copies of every index collected since (the lock held)."""
        if not self.orphans:
            return
        gone = {id(owner): owner for owner in self.orphans}  # kept alive, so ids stay theirs
        self.orphans.clear()
        self.cache.pop_where(lambda key: isinstance(key, tuple) and id(key[0]) in gone)


def _forget_owner(owner: object) -> None:
    """An index was collected: drop its copies (keys ``(owner, namespace)``) from the
    shared cache now if the lock is free, else at the next index made or collected.
    Never waits: the collector may run this on a thread that holds the lock
    (any allocation under it can trigger a collection), which waiting would hang."""
    SHARED.orphans.append(owner)
    if SHARED.lock.acquire(blocking=False):
        try:
            SHARED.drop_orphans()
        finally:
            SHARED.lock.release()


SHARED = _Shared()


def shared_held() -> tuple[int, int]:
    """``(copies, bytes)`` the process's shared cache holds now (see :data:`CACHE_BYTES`)."""
    with SHARED.lock:
        return len(SHARED.cache), SHARED.cache.held


class NamespaceCopies:
    """The namespace matrices of one index, under one lock, least recently searched
    out first (see :class:`MatrixCache` for ``keep_newest``). ``limit`` None:
    in the process's shared cache (:data:`CACHE_BYTES` for every such index
    together, under its lock); an int: a cache of this index's own of that many
    bytes. ``too_big`` names namespaces that did not fit (at most
    :data:`TOO_BIG_HELD`)."""

    def __init__(self, limit: int | None, *, keep_newest: bool = False) -> None:
        self.keep_newest = keep_newest
        self.too_big: set[str] = set()
        # This index's keys in the cache are (owner, namespace): the shared cache
        # holds every index's, and an index dropped unclosed leaves nothing there.
        self._owner = owner = object()
        if limit is None:
            self.lock, self.cache = SHARED.lock, SHARED.cache
            with self.lock:
                SHARED.drop_orphans()
            weakref.finalize(self, _forget_owner, owner).atexit = False
        else:
            self.lock = threading.Lock()
            self.cache = MatrixCache(limit)

    def _key(self, key: str) -> tuple[object, str]:
        return (self._owner, key)

    def __contains__(self, key: str) -> bool:
        with self.lock:
            return self._key(key) in self.cache

    def held(self, key: str) -> NamespaceMatrix | None:
        """The copy of ``key``, if held (to report against)."""
        with self.lock:
            return self.cache.get(self._key(key))

    def refresh(self, key: str, report: Report) -> MatrixView | None:
        """``key``'s rows as of now: ``report(copy or None)`` asks the store what
        changed since the copy (one read), then the copy is brought up to date; None
        when the store has no such namespace. A delta whose copy another thread
        replaced meanwhile is read again, whole."""
        held = self.held(key)
        change = report(held)
        if change is not None and held is not None:
            view = self.settle(key, change)
            if view is not None:
                return view
            change = report(None)
        if change is None:
            self.drop(key)
            return None
        view = self.settle(key, change)
        assert view is not None  # a whole namespace always settles
        return view

    def settle(self, key: str, change: Change) -> MatrixView | None:
        """Apply ``change`` to ``key``'s copy (a new one for a whole namespace) and
        hold it; None when it is a delta from a copy no longer held. A copy already
        at least as new is kept as it is (a thread that refreshed meanwhile)."""
        held = self._key(key)
        with self.lock:
            current = self.cache.get(held)
            if current is not None and current.epoch != change.epoch:
                current = None  # of another epoch: neither kept nor brought up to date
            if current is not None and current.version >= change.version:
                self.cache.touch(held)
                return current.view()
            if change.since is None:
                matrix = _whole(change)
            elif current is not None and current.version >= change.since:
                matrix = _applied(current, change)
            else:
                return None
            if not self.cache.put(held, matrix, keep_newest=self.keep_newest):
                if len(self.too_big) >= TOO_BIG_HELD:
                    self.too_big.clear()
                self.too_big.add(key)  # searched from this read, then dropped
                return matrix.view()
            self.too_big.discard(key)
            if matrix.n >= SKETCH_FROM and not matrix.sketching:
                matrix.sketching = True
                BUILDER.submit(partial(self._sketch, key, matrix))
            return matrix.view()

    def _sketch(self, key: str, matrix: NamespaceMatrix) -> None:
        """Fit ``matrix`` a sketch (in the builder's thread, outside the lock) and
        give it to the matrix if no row was rewritten meanwhile."""
        with self.lock:
            fitted, rewrites = matrix.n, matrix.rewrites
            rows = matrix.buffer[:fitted]  # appends never move rows of this buffer
        sketch = Sketch.fit(rows)
        if sketch is None:
            return  # the rows' energy does not concentrate: exact search stays
        with self.lock:
            if matrix.rewrites != rewrites:
                matrix.sketching = False  # asked again at the next refresh
                return
            if matrix.n > fitted:
                sketch.extend(matrix.buffer[fitted : matrix.n])
            matrix.sketch = sketch
            if self.cache.get(self._key(key)) is matrix:
                self.cache.put(self._key(key), matrix, keep_newest=self.keep_newest)  # measured again

    def drop(self, key: str) -> None:
        with self.lock:
            self.cache.pop(self._key(key))

    def clear(self) -> None:
        """Forget this index's copies (only its own, in the shared cache)."""
        owner = self._owner
        with self.lock:
            self.cache.pop_where(lambda key: isinstance(key, tuple) and key[0] is owner)


def _whole(change: Change) -> NamespaceMatrix:
    import numpy as np

    vectors = change.vectors
    matrix = NamespaceMatrix(vectors.shape[1], change.version, change.epoch)
    if vectors.flags.writeable and vectors.flags.c_contiguous and vectors.dtype == np.float32:
        # A matrix made for this copy (not a view of the store's bytes) is taken over
        # as it is: no second copy of a whole namespace.
        matrix.buffer, matrix.alive = vectors, np.ones(len(vectors), dtype=bool)
        matrix.keys = change.keys if isinstance(change.keys, list) else list(change.keys)
        matrix.where = {key: row for row, key in enumerate(matrix.keys)}
        matrix.n = len(vectors)
    elif len(change.keys):
        matrix.append(change.keys, vectors)  # copied with room for the next rows
    return matrix


def _applied(matrix: NamespaceMatrix, change: Change) -> NamespaceMatrix:
    if change.removed:
        matrix.remove(change.removed)
    if len(change.keys):
        matrix.upsert(change.keys, change.vectors)
    matrix = matrix.compacted()
    matrix.version, matrix.epoch = change.version, change.epoch
    return matrix


__all__ = [
    "CACHE_BYTES",
    "Change",
    "MatrixCache",
    "MatrixView",
    "NamespaceCopies",
    "NamespaceMatrix",
    "shared_held",
    "unit_rows",
    "unit_vector",
]
