"""Durable vectors, keyword postings and cached embeddings in the fact store's SQLite file.

The tables and their migrations are in ``sqlite_vectors_schema``: chunks, their
vectors clustered by namespace, FTS5 keyword postings with per-namespace BM25
statistics, cached embeddings, and per-namespace change generations that let a
process keep a namespace's matrix in memory and check it with one indexed read.

Search is exact cosine over one namespace with numpy (a per-user namespace is
small; see docs/semantic.md for where an ANN index takes over).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastaiagent._optional import require
from fastaiagent._sqlite import migrate
from fastaiagent._validate import integer
from fastaiagent._validate import text as check_text
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.index.keywords import bm25_top
from fastaiagent.facts.index.matrix import MatrixCache
from fastaiagent.facts.sqlite.store import SQLiteFactStore
from fastaiagent.facts.sqlite.vectors_schema import (
    RECORDED,
    fts_match,
    namespace_token,
    vectors_schema,
)
from fastaiagent.facts.vectors import RECORDED_LIMIT, RecordedSearch, keyword_text
from fastaiagent.kb.bm25 import tokenize
from fastaiagent.kb.protocols import (
    Chunk,
    DimensionMismatchError,
    NamespacedSearch,
    SearchHit,
    check_chunk,
    check_dimension,
    check_top_k,
    check_vector,
    id_list,
    namespace_key,
    wanted_keys,
)

DEFAULT_TABLE = "memory_vectors"
DEFAULT_CACHE_BYTES = 512 * 1024 * 1024  # in-process namespace matrices, LRU beyond this
_MAX_PARAMS = 500  # ids per IN (...) list
KEYWORD_CANDIDATES = 200  # documents a keyword search scores, with the namespace's statistics
_SPANS_PER_STATEMENT = 100  # SQLite allows 500 terms in a compound SELECT

def _batches(items: Sequence[Any], size: int = _MAX_PARAMS) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


@dataclass
class _Matrix:
    """One namespace's vectors in memory: rows ``[0, n)`` of ``buffer``, in rid order;
    a row this process deleted is masked out (``alive``) until the next compaction."""

    generation: int  # the namespace's ``changed`` generation this matrix reflects
    buffer: Any  # float32 (capacity, dimension)
    rids: Any  # int64 (capacity,), ascending over [0, n)
    n: int
    alive: Any  # bool (capacity,)
    dead: int = 0

    @property
    def nbytes(self) -> int:
        return int(self.buffer.nbytes + self.rids.nbytes + self.alive.nbytes)

    def view(self) -> tuple[Any, Any, Any]:
        """(rids, vectors, alive mask or None) of rows ``[0, n)``: what a search reads."""
        n = self.n
        return self.rids[:n], self.buffer[:n], (self.alive[:n] if self.dead else None)


class SQLiteVectorIndex(NamespacedSearch, RecordedSearch):
    """The :class:`~fastaiagent.facts.vectors.StoredVectorIndex` in a
    :class:`~fastaiagent.facts.sqlite.store.SQLiteFactStore` file (see the module doc).

    Thread-safe (per-thread connections; writes are ``BEGIN IMMEDIATE``
    transactions) and safe across processes sharing the file: each search
    checks its in-memory copy of the namespace against the file first.
    ``dimension`` fixes the size up front (None: the first add fixes it);
    ``cache_bytes`` bounds the namespace matrices kept in memory (LRU).
    Needs numpy.
    """

    def __init__(
        self,
        store: SQLiteFactStore,
        *,
        table: str = DEFAULT_TABLE,
        dimension: int | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        if not isinstance(store, SQLiteFactStore):
            raise InvalidTypeError(
                f"SQLiteVectorIndex needs a SQLiteFactStore, got {type(store).__name__}"
            )
        if not table.replace("_", "").isalnum() or not table[0].isalpha():
            raise InvalidValueError(f"table {table!r} must be a plain identifier")
        self._asked_dimension = check_dimension(dimension)
        self._cache_bytes = integer("cache_bytes", cache_bytes, minimum=0)
        self._np = require("numpy", "local")
        self.store = store
        self.table = table
        self._ready = False
        self._lock = threading.Lock()
        self._dimension: int | None = None
        self._matrices: MatrixCache[_Matrix] = MatrixCache(self._cache_bytes)

    def __repr__(self) -> str:
        return f"SQLiteVectorIndex(path={str(self.store.path)!r}, table={self.table!r})"

    # -- connections and metadata ------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn = self.store._connection()
        if not self._ready:
            with self._lock:
                if not self._ready:
                    migrate(conn, vectors_schema(self.table), str(self.store.path))
                    self._ready = True
            if self._asked_dimension is not None:
                self._check_asked(conn)
        return conn

    def _check_asked(self, conn: sqlite3.Connection) -> None:
        found = self._stored_dimension(conn)
        if found is not None and found != self._asked_dimension:
            raise DimensionMismatchError(
                f"the vector index {self.table!r} in {str(self.store.path)!r} has dimension "
                f"{found}, but dimension={self._asked_dimension} was asked; use an embedder "
                "of that size or another table"
            )

    def _stored_dimension(self, conn: sqlite3.Connection) -> int | None:
        row = conn.execute(
            f"SELECT value FROM {self.table}_meta WHERE name = 'dimension'"
        ).fetchone()
        return int(row[0]) if row else None

    @property
    def dimension(self) -> int | None:
        """The vector size: fixed by the constructor or the first add (in any process)."""
        if self._dimension is None:
            self._dimension = self._stored_dimension(self._conn()) or self._asked_dimension
        return self._dimension

    def _next_generation(self, conn: sqlite3.Connection) -> int:
        row = conn.execute(
            f"INSERT INTO {self.table}_meta (name, value) VALUES ('generation', 1) "
            "ON CONFLICT (name) DO UPDATE SET value = value + 1 RETURNING value"
        ).fetchone()
        return int(row[0])

    def _fix_dimension(self, conn: sqlite3.Connection, size: int) -> None:
        """Record ``size`` as the dimension, or raise if the file already has another."""
        conn.execute(
            f"INSERT OR IGNORE INTO {self.table}_meta (name, value) VALUES ('dimension', ?)",
            (size,),
        )
        stored = self._stored_dimension(conn)
        if stored != size:
            self._dimension = stored
            raise DimensionMismatchError(
                f"vectors have dimension {size} but the index has dimension {stored}; "
                "use an embedder of the same size or another table"
            )
        self._dimension = size

    # -- writes ------------------------------------------------------------

    def _rows(self, chunks: Sequence[Chunk]) -> tuple[list[tuple[Any, ...]], int]:
        """Validated insert rows (last write wins for a repeated id) and their dimension."""
        if isinstance(chunks, Chunk):
            raise InvalidTypeError("add() takes a list of chunks")
        dimension = self.dimension
        latest: dict[str, tuple[Chunk, list[float]]] = {}
        for chunk in chunks:
            vector = check_chunk(chunk, dimension)
            dimension = dimension or len(vector)
            latest.pop(chunk.id, None)
            latest[chunk.id] = (chunk, vector)
        assert dimension is not None or not latest
        np = self._np
        items = list(latest.values())
        matrix = np.asarray([v for _, v in items], dtype=np.float32).reshape(len(items), -1)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix /= np.where(norms > 0, norms, 1.0)
        rows = []
        for (chunk, _), vector in zip(items, matrix, strict=True):
            key = namespace_key(chunk.metadata)
            try:
                metadata = json.dumps(chunk.metadata, ensure_ascii=False)
            except (TypeError, ValueError) as exc:
                raise InvalidTypeError(
                    f"chunk {chunk.id!r} metadata must be JSON-serialisable: {exc}"
                ) from exc
            keywords = " ".join(tokenize(keyword_text(chunk)))
            rows.append(
                (chunk.id, key, namespace_token(key), chunk.text, keywords, metadata, dimension,
                 vector.tobytes())
            )
        return rows, dimension or 0

    def add(self, chunks: Sequence[Chunk]) -> None:
        """Insert or replace ``chunks`` by id (vectors, keyword postings: one transaction)."""
        rows, dimension = self._rows(chunks)
        if not rows:
            return
        self._conn()
        t = self.table
        with self.store._write() as conn:
            self._fix_dimension(conn, dimension)
            generation = self._next_generation(conn)
            removed = self._remove(conn, [row[0] for row in rows])
            insert = (
                f"INSERT INTO {t} (id, namespace, nskey, text, keywords, metadata, dimension) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING rid"
            )
            vectors = []
            for row in rows:
                (rid,) = conn.execute(insert, row[:-1]).fetchone()
                vectors.append((row[1], rid, row[-1]))
            conn.executemany(
                f"INSERT INTO {t}_vec (namespace, rid, vector) VALUES (?, ?, ?)", vectors
            )
            added = {row[1] for row in rows}
            prior = self._prior(conn, added | set(removed))
            self._mark(conn, generation, added, removed)
        self._apply_own(generation, prior, removed, vectors)

    def _remove(self, conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, list[int]]:
        """Delete rows by id (postings and vectors go with them); returns {namespace: rids}."""
        removed: dict[str, list[int]] = {}
        for batch in _batches(ids):
            marks = ", ".join("?" * len(batch))
            for namespace, rid in conn.execute(
                f"DELETE FROM {self.table} WHERE id IN ({marks}) RETURNING namespace, rid", batch
            ).fetchall():
                removed.setdefault(namespace, []).append(rid)
        return removed

    def _prior(self, conn: sqlite3.Connection, namespaces: set[str]) -> dict[str, int]:
        """The ``changed`` generation of namespaces before this write marks them."""
        out: dict[str, int] = {}
        for namespace in namespaces:
            row = conn.execute(
                f"SELECT changed FROM {self.table}_ns WHERE namespace = ?", (namespace,)
            ).fetchone()
            if row is not None:
                out[namespace] = int(row[0])
        return out

    def _mark(
        self,
        conn: sqlite3.Connection,
        generation: int,
        added: set[str],
        removed: Mapping[str, Sequence[int]],
    ) -> None:
        """Record which namespaces changed (readers compare these with their copies).

        A new namespace row starts with ``removed = generation``, so a reader's copy
        of an earlier namespace of that name is reloaded, never appended to.
        """
        t = self.table
        for namespace in added | set(removed):
            conn.execute(
                f"INSERT INTO {t}_ns (namespace, changed, removed) VALUES (?, ?, ?) "
                "ON CONFLICT (namespace) DO UPDATE SET changed = excluded.changed, "
                "removed = CASE WHEN ? THEN excluded.removed ELSE removed END",
                (namespace, generation, generation, namespace in removed),
            )
        for namespace in set(removed) - added:
            if not conn.execute(
                f"SELECT 1 FROM {t} WHERE namespace = ? LIMIT 1", (namespace,)
            ).fetchone():
                conn.execute(f"DELETE FROM {t}_ns WHERE namespace = ?", (namespace,))
                conn.execute(f"DELETE FROM {t}_kw WHERE namespace = ?", (namespace,))

    def delete(self, ids: Sequence[str]) -> int:
        """Delete chunks by id (vectors and keyword postings); returns how many were there."""
        wanted = id_list(ids, "delete")
        if not wanted:
            return 0
        self._conn()
        with self.store._write() as conn:
            removed = self._remove(conn, wanted)
            if not removed:
                return 0
            generation = self._next_generation(conn)
            prior = self._prior(conn, set(removed))
            self._mark(conn, generation, set(), removed)
        self._apply_own(generation, prior, removed, [])
        return sum(len(rids) for rids in removed.values())

    def delete_namespace(self, namespace: str) -> int:
        """Delete every chunk, keyword posting and cached embedding of ``namespace``."""
        check_text("namespace", namespace)
        self._conn()
        t = self.table
        with self.store._write() as conn:
            conn.execute(f"DELETE FROM {t}_vec WHERE namespace = ?", (namespace,))  # in bulk
            count = conn.execute(f"DELETE FROM {t} WHERE namespace = ?", (namespace,)).rowcount
            conn.execute(f"DELETE FROM {t}_cache WHERE namespace = ?", (namespace,))
            conn.execute(f"DELETE FROM {t}_ns WHERE namespace = ?", (namespace,))
            conn.execute(f"DELETE FROM {t}_kw WHERE namespace = ?", (namespace,))
        with self._lock:
            self._matrices.pop(namespace)
        return int(count)

    # -- the in-memory copies of namespaces ---------------------------------

    def _read(self, conn: sqlite3.Connection, namespace: str, after: int) -> tuple[Any, Any]:
        """(rids, vectors) of ``namespace``'s rows with ``rid > after``, in rid order: one query."""
        np = self._np
        rows = conn.execute(
            f"SELECT rid, vector FROM {self.table}_vec WHERE namespace = ? AND rid > ? "
            "ORDER BY rid",
            (namespace, after),
        ).fetchall()
        rids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
        blob = b"".join(row[1] for row in rows)
        dimension = self.dimension or 1
        return rids, np.frombuffer(blob, dtype=np.float32).reshape(len(rows), dimension)

    def _grown(self, matrix: _Matrix, rids: Any, vectors: Any) -> _Matrix:
        """``matrix`` with rows appended (in place while there is room; readers only
        see rows ``[0, n)`` of the copy they took)."""
        np = self._np
        n, need = matrix.n, matrix.n + len(rids)
        if need > len(matrix.rids) or not matrix.buffer.flags.writeable:
            # 1/8 headroom, not doubling: a 100k x 384 namespace is 150 MB already.
            capacity = max(need + need // 8, 64)
            buffer = np.empty((capacity, matrix.buffer.shape[1]), dtype=np.float32)
            buffer[:n] = matrix.buffer[:n]
            ids = np.empty(capacity, dtype=np.int64)
            ids[:n] = matrix.rids[:n]
            alive = np.ones(capacity, dtype=bool)
            alive[:n] = matrix.alive[:n]
            matrix = _Matrix(matrix.generation, buffer, ids, n, alive, matrix.dead)
        matrix.buffer[n:need] = vectors
        matrix.rids[n:need] = rids
        matrix.alive[n:need] = True
        matrix.n = need
        return matrix

    def _compacted(self, matrix: _Matrix) -> _Matrix:
        """``matrix`` without its masked rows (a new copy: readers keep theirs)."""
        rids, vectors, alive = matrix.view()
        if alive is None:
            return matrix
        empty = _Matrix(matrix.generation, vectors[:0], rids[:0], 0, alive[:0])
        return self._grown(empty, rids[alive], vectors[alive])

    def _apply_own(
        self,
        generation: int,
        prior: Mapping[str, int],
        removed: Mapping[str, Sequence[int]],
        written: Sequence[tuple[str, int, bytes]],
    ) -> None:
        """Bring this process's copies up to a write it just committed, without a read.

        Only a copy that reflected the namespace right before the write (its
        generation equals the one read inside the write transaction) is updated;
        any other copy is left for the next search to check.
        """
        np = self._np
        appended: dict[str, list[tuple[int, bytes]]] = {}
        for namespace, rid, blob in written:
            appended.setdefault(namespace, []).append((rid, blob))
        with self._lock:
            for namespace, before in prior.items():
                matrix = self._matrices.get(namespace)
                if matrix is None or matrix.generation != before:
                    continue
                gone = np.asarray(removed.get(namespace, ()), dtype=np.int64)
                if len(gone) and matrix.n:  # rids ascend: a removed rid is found by bisection
                    rids = matrix.rids[: matrix.n]
                    at = np.searchsorted(rids, gone)
                    at = at[(at < matrix.n) & (rids[np.minimum(at, matrix.n - 1)] == gone)]
                    matrix.alive[at] = False
                    matrix.dead += len(at)
                new = appended.get(namespace, [])
                if new:
                    blob = b"".join(b for _, b in new)
                    vectors = np.frombuffer(blob, dtype=np.float32).reshape(len(new), -1)
                    matrix = self._grown(matrix, [r for r, _ in new], vectors)
                if matrix.dead * 4 > matrix.n:
                    matrix = self._compacted(matrix)
                matrix.generation = generation
                self._matrices.put(namespace, matrix)

    def _namespace(self, conn: sqlite3.Connection, namespace: str) -> tuple[Any, Any, Any] | None:
        """(rids, unit vectors, alive mask or None) of a namespace, from the in-memory
        copy when it is current.

        One indexed read checks the copy; rows appended since are read alone; a
        removal by another process since reloads the namespace. The copy is
        labelled with the generation read *before* its rows, so a write in
        between only costs a re-check later, never a stale answer.
        """
        row = conn.execute(
            f"SELECT changed, removed FROM {self.table}_ns WHERE namespace = ?", (namespace,)
        ).fetchone()
        with self._lock:
            if row is None:
                self._matrices.pop(namespace)
                return None
            changed, removed = int(row[0]), int(row[1])
            current = self._matrices.get(namespace)
            if current is not None:
                self._matrices.touch(namespace)
                n, generation = current.n, current.generation
                if generation == changed:
                    return current.view()
        if current is not None and generation >= removed:
            after = int(current.rids[n - 1]) if n else 0
            rids, vectors = self._read(conn, namespace, after)
            with self._lock:
                if self._matrices.get(namespace) is current and current.n == n:
                    current = self._grown(current, rids, vectors)
                    current.generation = changed
                    self._matrices.put(namespace, current)
                    return current.view()
            return self._read_all(conn, namespace)  # raced with another thread: no copy
        rids, vectors = self._read(conn, namespace, 0)
        # Copied into a buffer with room, so the next turn's append needs no regrowth.
        empty = _Matrix(changed, vectors[:0], rids[:0], 0, self._np.ones(0, dtype=bool))
        matrix = self._grown(empty, rids, vectors)
        with self._lock:
            self._matrices.put(namespace, matrix)
        return matrix.view()

    def _read_all(self, conn: sqlite3.Connection, namespace: str) -> tuple[Any, Any, Any]:
        rids, vectors = self._read(conn, namespace, 0)
        return rids, vectors, None

    # -- reads -------------------------------------------------------------

    def _query(self, vector: Sequence[float]) -> Any:
        np = self._np
        query = np.asarray(check_vector(vector, self._dimension, "query vector"), dtype=np.float32)
        norm = float(np.linalg.norm(query))
        return query / norm if norm > 0 else query

    def _best(
        self, rids: Any, vectors: Any, alive: Any, query: Any, top_k: int
    ) -> list[tuple[float, int]]:
        np = self._np
        if len(rids) == 0:
            return []
        # einsum runs in the calling thread. BLAS (``@``) wakes its thread pool: faster on
        # idle cores, but at 10k x 384 with both cores busy p99 12 ms against 9.9 ms.
        scores = np.einsum("ij,j->i", vectors, query)
        if alive is not None:  # rows this process deleted, not yet compacted away
            scores[~alive] = -np.inf
        if len(scores) > top_k:
            picked = np.argpartition(-scores, top_k - 1)[:top_k]
        else:
            picked = np.arange(len(scores))
        return [(float(scores[i]), int(rids[i])) for i in picked if scores[i] > -np.inf]

    def search_namespaces(
        self, vector: Sequence[float], top_k: int, keys: list[str] | None
    ) -> list[SearchHit]:
        """The ``top_k`` chunks closest by cosine, best first (exact search).

        ``keys=None`` (``search(namespace=None)``) reads every chunk (no in-memory
        copy: meant for maintenance, not per-turn recall).
        """
        if self.dimension is None:
            return []
        query = self._query(vector)
        conn = self._conn()
        found: list[tuple[float, int]] = []
        if keys is None:
            for key in self._all_namespaces(conn):
                found += self._best(*self._read_all(conn, key), query, top_k)
        else:
            for key in keys:
                held = self._namespace(conn, key)
                if held is not None:
                    found += self._best(*held, query, top_k)
        return self._hits(conn, found, top_k)

    def search_spans(
        self,
        vector: Sequence[float],
        top_k: int,
        keys: list[str],
        spans: Sequence[tuple[float, float]],
    ) -> list[SearchHit]:
        """See :class:`~fastaiagent.facts.vectors.ListsRecorded`: the rows of the spans
        from the time index, ranked in this process's copy of the namespace."""
        if self.dimension is None:
            return []
        np = self._np
        query = self._query(vector)
        conn = self._conn()
        found: list[tuple[float, int]] = []
        for key in keys:
            held = self._namespace(conn, key)
            wanted = self._recorded(conn, key, spans)
            if held is None or not len(held[0]) or not len(wanted):
                continue
            rids, vectors, alive = held
            # rids ascend: a recorded rid's row is found by bisection (one written
            # after this copy was taken is left to the next search).
            at = np.minimum(np.searchsorted(rids, wanted), len(rids) - 1)
            at = at[rids[at] == wanted]
            if alive is not None:
                at = at[alive[at]]
            found += self._best(rids[at], vectors[at], None, query, top_k)
        return self._hits(conn, found, top_k)

    def _recorded(
        self, conn: sqlite3.Connection, namespace: str, spans: Sequence[tuple[float, float]]
    ) -> Any:
        """The rids of ``namespace`` recorded in ``spans``, ascending (one statement: a
        range read of the time index per span); none when more than
        :data:`RECORDED_LIMIT` are."""
        one = f"SELECT rid FROM {self.table} WHERE namespace = ? AND {RECORDED} >= ? AND {RECORDED} < ?"
        rids: list[int] = []
        for batch in _batches(spans, _SPANS_PER_STATEMENT):
            sql = " UNION ALL ".join([one] * len(batch)) + " LIMIT ?"
            params = [value for start, end in batch for value in (namespace, start, end)]
            rows = conn.execute(sql, [*params, RECORDED_LIMIT + 1 - len(rids)]).fetchall()
            rids += [row[0] for row in rows]
            if len(rids) > RECORDED_LIMIT:
                return self._np.empty(0, dtype=self._np.int64)
        return self._np.unique(self._np.asarray(rids, dtype=self._np.int64))

    def _hits(
        self, conn: sqlite3.Connection, found: list[tuple[float, int]], top_k: int
    ) -> list[SearchHit]:
        """The ``top_k`` best of ``(score, rid)`` as hits (rows deleted meanwhile left out)."""
        found.sort(key=lambda pair: -pair[0])
        found = found[:top_k]
        chunks = self._by_rid(conn, [rid for _, rid in found])
        return [SearchHit(chunks[rid], score) for score, rid in found if rid in chunks]

    def _all_namespaces(self, conn: sqlite3.Connection) -> list[str]:
        return [row[0] for row in conn.execute(f"SELECT namespace FROM {self.table}_ns")]

    def _by_rid(self, conn: sqlite3.Connection, rids: Sequence[int]) -> dict[int, Chunk]:
        out: dict[int, Chunk] = {}
        for batch in _batches(rids):
            marks = ", ".join("?" * len(batch))
            for rid, chunk_id, text, metadata in conn.execute(
                f"SELECT rid, id, text, metadata FROM {self.table} WHERE rid IN ({marks})", batch
            ):
                out[rid] = Chunk(chunk_id, text, None, json.loads(metadata))
        return out

    def keyword_search(self, query: str, top_k: int, *, namespace: str) -> list[tuple[str, float]]:
        """``(chunk id, score)`` of the best BM25 matches in ``namespace``, best first.

        FTS5 finds the namespace's documents holding a query term; they are scored
        with the namespace's own statistics (Okapi BM25 as
        :class:`~fastaiagent.kb.bm25.BM25Index`, k1 1.2, b 0.75), so a user's
        ranking does not depend on what other users said."""
        check_text("query", query, allow_empty=True)
        check_top_k(top_k)
        check_text("namespace", namespace)
        terms = sorted(set(tokenize(query)))
        if not terms or top_k == 0:
            return []
        t = self.table
        conn = self._conn()
        stats = conn.execute(
            f"SELECT docs, tokens FROM {t}_kw WHERE namespace = ?", (namespace,)
        ).fetchone()
        if not stats or stats[0] <= 0:
            return []
        nskey = namespace_token(namespace)
        # Per-term document counts of the namespace, from FTS5 counts (never by
        # reading every match), many terms a statement; the candidates are scored with them.
        count = f"(SELECT count(*) FROM {t}_fts WHERE {t}_fts MATCH ?)"
        frequency: dict[str, int] = {}
        for batch in _batches(terms):
            found = conn.execute(
                f"SELECT {', '.join([count] * len(batch))}",
                [fts_match(nskey, [term]) for term in batch],
            ).fetchone()
            frequency.update(zip(batch, found, strict=True))
        counted = []
        for chunk_id, keywords in self._keyword_candidates(
            conn, nskey, frequency, max(KEYWORD_CANDIDATES, 4 * top_k)
        ):
            tokens = keywords.split()
            counts = {term: tokens.count(term) for term in terms if term in tokens}
            counted.append((chunk_id, len(tokens), counts))
        return bm25_top(frequency, counted, stats[0], stats[1], top_k)

    def _keyword_candidates(
        self, conn: sqlite3.Connection, nskey: str, frequency: dict[str, int], limit: int
    ) -> list[tuple[str, str]]:
        """``(id, keywords)`` of at most about ``limit`` documents to score: every one
        holding one of the rarest query terms (as many terms as fit in ``limit``
        documents), then the newest holding the others. The rare terms carry BM25's
        weight; FTS5's own ranking of every match (``bm25()``) costs about 4 us a
        document, 10 ms for a common word in a 10k-message namespace."""
        rare: list[str] = []
        common: list[str] = []
        postings = 0
        for term in sorted((t for t in frequency if frequency[t]), key=frequency.__getitem__):
            if postings + frequency[term] <= limit:
                rare.append(term)
                postings += frequency[term]
            else:
                common.append(term)
        t = self.table
        select = f"SELECT c.id, c.keywords FROM {t}_fts JOIN {t} c ON c.rid = {t}_fts.rowid "
        rows: list[tuple[str, str]] = []
        if rare:
            rows = conn.execute(
                select + f"WHERE {t}_fts MATCH ?", (fts_match(nskey, rare),)
            ).fetchall()
        if common and len(rows) < limit:
            seen = {chunk_id for chunk_id, _ in rows}
            newest = conn.execute(
                select + f"WHERE {t}_fts MATCH ? ORDER BY {t}_fts.rowid DESC LIMIT ?",
                (fts_match(nskey, common), limit),
            ).fetchall()
            rows += [row for row in newest if row[0] not in seen][: limit - len(rows)]
        return rows

    def ids(self, namespace: str) -> set[str]:
        """Every chunk id ``namespace`` holds."""
        check_text("namespace", namespace)
        rows = self._conn().execute(
            f"SELECT id FROM {self.table} WHERE namespace = ?", (namespace,)
        )
        return {row[0] for row in rows}

    def get(self, ids: Sequence[str]) -> list[Chunk]:
        """The chunks with these ids that exist, in the order asked (vectors omitted)."""
        wanted = id_list(ids, "get")
        found: dict[str, Chunk] = {}
        conn = self._conn()
        for batch in _batches(wanted):
            marks = ", ".join("?" * len(batch))
            for chunk_id, text, metadata in conn.execute(
                f"SELECT id, text, metadata FROM {self.table} WHERE id IN ({marks})", batch
            ):
                found[chunk_id] = Chunk(chunk_id, text, None, json.loads(metadata))
        return [found[i] for i in wanted if i in found]

    def chunks(self, namespace: str | None, *, include_untagged: bool = False) -> list[Chunk]:
        """Every chunk of a namespace (vectors omitted), oldest first."""
        keys = wanted_keys(namespace, include_untagged)
        where, params = ("", ()) if keys is None else (
            f"WHERE namespace IN ({', '.join('?' * len(keys))})", tuple(keys)
        )
        rows = self._conn().execute(
            f"SELECT id, text, metadata FROM {self.table} {where} ORDER BY rid", params
        )
        return [Chunk(chunk_id, text, None, json.loads(meta)) for chunk_id, text, meta in rows]

    def count(self, namespace: str | None = None) -> int:
        """How many chunks the index (or one namespace) holds."""
        if namespace is None:
            row = self._conn().execute(f"SELECT COUNT(*) FROM {self.table}").fetchone()
        else:
            check_text("namespace", namespace)
            row = self._conn().execute(
                f"SELECT COUNT(*) FROM {self.table} WHERE namespace = ?", (namespace,)
            ).fetchone()
        return int(row[0])

    # -- the embedding cache -------------------------------------------------

    def cached_embeddings(
        self, identity: str, namespace: str, keys: Sequence[str]
    ) -> dict[str, list[float]]:
        """Cached vectors of ``identity`` by text key in ``namespace`` (missing keys left out)."""
        check_text("identity", identity)
        check_text("namespace", namespace)
        np = self._np
        out: dict[str, list[float]] = {}
        conn = self._conn()
        for batch in _batches(list(dict.fromkeys(keys))):
            marks = ", ".join("?" * len(batch))
            for key, blob in conn.execute(
                f"SELECT text_key, vector FROM {self.table}_cache WHERE namespace = ? "
                f"AND identity = ? AND text_key IN ({marks})",
                (namespace, identity, *batch),
            ):
                out[key] = np.frombuffer(blob, dtype=np.float32).tolist()
        return out

    def cache_embeddings(
        self, identity: str, namespace: str, vectors: Mapping[str, Sequence[float]]
    ) -> None:
        """Remember vectors of ``identity`` by text key in ``namespace`` (float32)."""
        check_text("identity", identity)
        check_text("namespace", namespace)
        np = self._np
        rows = [
            (namespace, identity, check_text("text key", key),
             np.asarray(check_vector(vector, None, f"cached vector {key!r}"),
                        dtype=np.float32).tobytes())
            for key, vector in vectors.items()
        ]
        if not rows:
            return
        self._conn()
        with self.store._write() as conn:
            conn.executemany(
                f"INSERT OR REPLACE INTO {self.table}_cache (namespace, identity, text_key, "
                "vector) VALUES (?, ?, ?, ?)",
                rows,
            )

    def close(self) -> None:
        """Drop the in-memory namespace copies (the connections belong to the fact store)."""
        with self._lock:
            self._matrices.clear()


__all__ = ["DEFAULT_TABLE", "SQLiteVectorIndex"]
