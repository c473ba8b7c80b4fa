"""Durable vectors, keyword postings and cached embeddings in Postgres, next to the facts.

Tables (schema component ``vectors:<fact table>_vectors``), on the fact store's pool:

- ``<t>_vectors``: one row per chunk (id, namespace, text, metadata JSONB, the
  L2-normalised vector as float32 bytes, its dimension, the namespace
  generation that wrote it, and a ``tsvector`` of its keyword tokens written with
  the row, plus one lexeme naming the namespace so a keyword query reads only
  that namespace's rows), indexed on (namespace, generation) and by GIN on the
  tsvector;
- ``<t>_vector_ns``: per namespace, the generation of its last write and the
  epoch of its last removal, both drawn from one sequence under the namespace
  row's lock, so generations grow in commit order within a namespace;
- ``<t>_embeddings``: cached embeddings by (namespace, embedder identity, text key);
- ``<t>_vector_meta``: the index's dimension, fixed by the first add.

Search is exact cosine over one namespace with numpy: each process keeps the
namespace's matrix in memory (LRU, bounded by ``cache_bytes``) and checks it
with one indexed statement per search, which also returns what was written
since (a removal reloads the namespace). A per-user namespace is small, so
exact search stays in milliseconds. With the pgvector extension
(:mod:`fastaiagent.facts.postgres.pgvector`) the vectors are also written to a ``vector``
column, and a namespace this process holds no copy of yet is searched in the
server while its copy loads in the background.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from fastaiagent._optional import require
from fastaiagent._validate import boolean, integer
from fastaiagent._validate import text as check_text
from fastaiagent.errors import InvalidTypeError
from fastaiagent.facts.index.matrix import MatrixCache
from fastaiagent.facts.postgres import keywords, pgvector
from fastaiagent.facts.postgres.store import PostgresFactStore, redacted_url, sql
from fastaiagent.facts.schema import Schema, migrate_postgres
from fastaiagent.facts.vectors import RECORDED_LIMIT, RecordedSearch, keyword_text, text_key
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

logger = logging.getLogger("fastaiagent.facts.postgres.vectors")

DEFAULT_CACHE_BYTES = 512 * 1024 * 1024  # in-process namespace matrices, LRU beyond this
_NONE = -1  # an epoch no namespace has (the sequence starts at 1): read everything

_DDL = (
    "CREATE SEQUENCE IF NOT EXISTS {seq}",
    "CREATE TABLE IF NOT EXISTS {v} (id TEXT PRIMARY KEY, namespace TEXT NOT NULL, "
    "text TEXT NOT NULL, metadata JSONB NOT NULL, vector BYTEA NOT NULL, "
    "dimension INTEGER NOT NULL, gen BIGINT NOT NULL, tsv TSVECTOR NOT NULL)",
    "ALTER SEQUENCE {seq} OWNED BY {v}.gen",  # dropped with the table
    "CREATE INDEX IF NOT EXISTS {idx_ns} ON {v} (namespace, gen)",
    # fastupdate off: a search never scans a long pending list (writes are one turn's rows).
    "CREATE INDEX IF NOT EXISTS {idx_tsv} ON {v} USING GIN (tsv) WITH (fastupdate = off)",
    "CREATE TABLE IF NOT EXISTS {n} (namespace TEXT PRIMARY KEY, gen BIGINT NOT NULL, "
    "epoch BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {e} (namespace TEXT NOT NULL, identity TEXT NOT NULL, "
    "text_key TEXT NOT NULL, vector BYTEA NOT NULL, PRIMARY KEY (namespace, identity, text_key))",
    "CREATE TABLE IF NOT EXISTS {m} (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
)

_QUERIES = {
    "dimension": "SELECT value FROM {m} WHERE name = 'dimension'",
    "fix_dimension": "INSERT INTO {m} (name, value) VALUES ('dimension', %s) "
    "ON CONFLICT (name) DO NOTHING",
    "where_now": "SELECT id, namespace FROM {v} WHERE id = ANY(%s)",
    # SET runs after the row lock is taken: generations grow in commit order.
    "bump": "INSERT INTO {n} (namespace, gen, epoch) SELECT %s, g, g FROM nextval({seq_name}) g "
    "ON CONFLICT (namespace) DO UPDATE SET gen = nextval({seq_name}) RETURNING gen",
    "removed": "UPDATE {n} SET epoch = nextval({seq_name}) WHERE namespace = %s",
    "upsert": "INSERT INTO {v} (id, namespace, text, metadata, vector, dimension, gen, tsv, "
    "ntokens) VALUES (%s, %s, %s, %s, %s, %s, %s, to_tsvector('simple', %s), %s) "
    "ON CONFLICT (id) DO UPDATE SET namespace = excluded.namespace, text = excluded.text, "
    "metadata = excluded.metadata, vector = excluded.vector, dimension = excluded.dimension, "
    "gen = excluded.gen, tsv = excluded.tsv, ntokens = excluded.ntokens",
    # One statement, one snapshot: the namespace's state and the rows written
    # since the cached generation (all of them when the epoch moved).
    "refresh": "SELECT n.gen, n.epoch, v.id, v.vector FROM {n} n LEFT JOIN {v} v "
    "ON v.namespace = n.namespace AND v.dimension = %s "
    "AND v.gen > CASE WHEN n.epoch = %s THEN %s ELSE -1 END WHERE n.namespace = %s",
    "rows": "SELECT id, text, metadata FROM {v} WHERE id = ANY(%s)",
    "hits": "SELECT id, text, metadata FROM {v} WHERE id = ANY(%s) AND namespace = ANY(%s)",
    "ids": "SELECT id FROM {v} WHERE namespace = %s",
    "namespaces": "SELECT namespace FROM {n}",
    "delete_rows": "DELETE FROM {v} WHERE id = ANY(%s) RETURNING namespace, text",
    "forget_texts": "DELETE FROM {e} WHERE (namespace, text_key) IN "
    "(SELECT * FROM unnest(%s::text[], %s::text[]))",
    "delete_ns_rows": "DELETE FROM {v} WHERE namespace = %s",
    "delete_ns_cache": "DELETE FROM {e} WHERE namespace = %s",
    "delete_ns": "DELETE FROM {n} WHERE namespace = %s",
    "cached": "SELECT text_key, vector FROM {e} WHERE namespace = %s AND identity = %s "
    "AND text_key = ANY(%s)",
    "cache": "INSERT INTO {e} (namespace, identity, text_key, vector) VALUES (%s, %s, %s, %s) "
    "ON CONFLICT (namespace, identity, text_key) DO UPDATE SET vector = excluded.vector",
}
# Step 3: chunks by the time they were recorded (a numeric ``metadata.created_at``), so
# search_recorded reads a span's rows with one index range scan.
_RECORDED = (
    "(CASE WHEN jsonb_typeof(metadata->'created_at') = 'number' "
    "THEN (metadata->>'created_at')::float8 END)"
)
_STEP3 = (
    "DROP INDEX CONCURRENTLY IF EXISTS {idx_recorded}",  # an interrupted build's leftover
    f"CREATE INDEX CONCURRENTLY {{idx_recorded}} ON {{v}} (namespace, {_RECORDED})",
)
_QUERIES["recorded"] = (
    "SELECT r.id FROM unnest(%s::float8[], %s::float8[]) AS s(a, b) CROSS JOIN LATERAL "
    f"(SELECT id FROM {{v}} WHERE namespace = %s AND {_RECORDED} >= s.a AND {_RECORDED} < s.b "
    "LIMIT %s) r LIMIT %s"
)
_QUERIES["server_search_ids"] = (
    "SELECT id, text, metadata, 1 - (embedding <=> %s::vector) AS score FROM {v} "
    "WHERE id = ANY(%s) AND namespace = %s AND dimension = %s AND embedding IS NOT NULL "
    "ORDER BY embedding <=> %s::vector, id LIMIT %s"
)
# pgvector: exact search of one namespace in the server, on the ``embedding`` column.
_QUERIES["server_search"] = (
    "SELECT id, text, metadata, 1 - (embedding <=> %s::vector) AS score FROM {v} "
    "WHERE namespace = %s AND dimension = %s AND embedding IS NOT NULL "
    "ORDER BY embedding <=> %s::vector, id LIMIT %s"
)
# With pgvector the row's vector is also written to its ``embedding`` column, in the
# same statement (a second UPDATE would leave a dead copy of every row behind).
_QUERIES["upsert_pgvector"] = (
    _QUERIES["upsert"]
    .replace("ntokens)", "ntokens, embedding)")
    .replace("%s), %s) ON", "%s), %s, %s::vector) ON")
    .replace("ntokens = excluded.ntokens", "ntokens = excluded.ntokens, embedding = excluded.embedding")
)


def vectors_table_for(fact_table: str) -> str:
    """The vector table that goes with a fact table (the others share its prefix)."""
    return f"{fact_table}_vectors"


def _names(fact_table: str) -> dict[str, Any]:
    v = vectors_table_for(fact_table)
    return {
        "v": sql.Identifier(v),
        "n": sql.Identifier(f"{fact_table}_vector_ns"),
        "e": sql.Identifier(f"{fact_table}_embeddings"),
        "m": sql.Identifier(f"{fact_table}_vector_meta"),
        "seq": sql.Identifier(f"{v}_gen"),
        # nextval() reads a name: quoted, so its case is kept.
        "seq_name": sql.Literal('"' + f"{v}_gen".replace('"', '""') + '"'),
        "idx_ns": sql.Identifier(f"idx_{v}_ns"),
        "idx_tsv": sql.Identifier(f"idx_{v}_tsv"),
        "idx_recorded": sql.Identifier(f"idx_{v}_recorded"),
        "stats_fn": sql.Identifier(f"{v}_kw_stats"),
        "stats_trigger": sql.Identifier(f"{v}_kw_stats"),
    }


@dataclass
class _Matrix:
    """One namespace's vectors in memory: rows ``[0, n)`` of ``buffer`` are live."""

    gen: int
    epoch: int
    buffer: Any  # float32 (capacity, dimension)
    ids: list[str]
    where: dict[str, int]  # chunk id -> row

    @property
    def nbytes(self) -> int:
        return int(self.buffer.nbytes)

    def merge(self, np: Any, ids: list[str], vectors: Any) -> None:
        """Replace rows of known ids in place, append the others (capacity doubles)."""
        for chunk_id, vector in zip(ids, vectors, strict=True):
            row = self.where.get(chunk_id)
            if row is None:
                row = len(self.ids)
                if row == len(self.buffer):
                    grown = np.empty((max(16, 2 * row), self.buffer.shape[1]), dtype="float32")
                    grown[:row] = self.buffer[:row]
                    self.buffer = grown
                self.buffer[row] = vector  # written before the row is counted
                self.ids.append(chunk_id)
                self.where[chunk_id] = row
            else:
                self.buffer[row] = vector


class PostgresVectorIndex(NamespacedSearch, RecordedSearch):
    """The :class:`~fastaiagent.facts.vectors.StoredVectorIndex` in a
    :class:`~fastaiagent.facts.postgres.store.PostgresFactStore`'s database (see the module doc).

    Thread-safe, and safe across processes and hosts: each search checks its
    in-memory copy of the namespace against the database first. ``dimension``
    fixes the size up front (None: the first add, in any process, fixes it);
    ``cache_bytes`` bounds the namespace matrices kept in memory (LRU).
    ``pgvector``: None uses the ``vector`` extension when the server has it,
    True requires it, False never uses it. Errors
    of the server are classified as the fact store's are
    (:class:`~fastaiagent.errors.StoreUnavailableError` for an outage). Needs numpy.
    """

    def __init__(
        self,
        store: PostgresFactStore,
        *,
        dimension: int | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        pgvector: bool | None = None,
    ) -> None:
        if not isinstance(store, PostgresFactStore):
            raise InvalidTypeError(
                f"PostgresVectorIndex needs a PostgresFactStore, got {type(store).__name__}"
            )
        self._asked_dimension = check_dimension(dimension)
        self._cache_bytes = integer("cache_bytes", cache_bytes, minimum=0)
        self._asked_pgvector = None if pgvector is None else boolean("pgvector", pgvector)
        self._pgvector = False
        self._warming: set[str] = set()  # namespaces whose copy loads in the background
        self._too_big: set[str] = set()  # namespaces larger than cache_bytes
        self._np = require("numpy", "postgres")
        self.store = store
        self.table = vectors_table_for(store.table)
        names = _names(store.table)
        queries = {**_QUERIES, **keywords.QUERIES}
        self._q = {k: sql.SQL(text).format(**names) for k, text in queries.items()}
        steps = [[sql.SQL(text).format(**names) for text in ddl] for ddl in (_DDL, keywords.STEP2, _STEP3)]
        # Step 3 builds CONCURRENTLY, outside a transaction: a busy table's writers go on.
        runs = [partial(_run_ddl, ddl=ddl, transaction=n < 2) for n, ddl in enumerate(steps)]
        self._schema = Schema(f"vectors:{self.table}", runs)
        self._ready = False
        self._dimension: int | None = None
        self._fixed = False  # whether the database holds self._dimension
        self._lock = threading.Lock()
        self._matrices: MatrixCache[_Matrix] = MatrixCache(self._cache_bytes)

    def __repr__(self) -> str:
        return f"PostgresVectorIndex(table={self.table!r})"

    # -- connections and metadata ------------------------------------------

    def _run(self, operation: Any) -> Any:
        """``operation(conn)`` through the fact store's pool and error handling."""

        def run(conn: Any) -> Any:
            if not self._ready:
                where = f"the database at {redacted_url(self.store.url)}"
                migrate_postgres(conn, self._schema, self.table, where)
                self._pgvector = pgvector.enable(conn, self.table, self._asked_pgvector, where)
                self._load_dimension(conn)
                self._ready = True
            return operation(conn)

        return self.store._run(run)

    def _load_dimension(self, conn: Any) -> None:
        row = conn.execute(self._q["dimension"]).fetchone()
        found = None if row is None else int(row[0])
        asked = self._asked_dimension
        if found is not None and asked is not None and found != asked:
            raise DimensionMismatchError(
                f"the vector index {self.table!r} has dimension {found}, but "
                f"dimension={asked} was asked; use an embedder of that size or another fact table"
            )
        self._dimension = found or asked
        self._fixed = found is not None

    def _fix_dimension(self, conn: Any, size: int) -> None:
        """Record ``size`` as the dimension, or raise if the database has another."""
        if self._fixed and self._dimension == size:
            return
        conn.execute(self._q["fix_dimension"], (size,))
        self._load_dimension(conn)
        if self._dimension != size:
            raise DimensionMismatchError(
                f"vectors have dimension {size} but the index has dimension {self._dimension}; "
                "use an embedder of the same size or another fact table"
            )

    @property
    def uses_pgvector(self) -> bool:
        """Whether vectors are also kept in a pgvector column (and cold searches run there)."""
        self._run(lambda conn: None)
        return self._pgvector

    @property
    def dimension(self) -> int | None:
        """The vector size: fixed by the constructor or the first add (in any process)."""
        if self._dimension is None:
            self._run(self._load_dimension)
        return self._dimension

    def _normalised(self, vectors: list[list[float]]) -> Any:
        np = self._np
        matrix = np.asarray(vectors, dtype="float32")
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        norms[norms == 0] = 1.0  # a zero vector stays zero (scores 0 against anything)
        return matrix / norms

    # -- writes --------------------------------------------------------------

    def add(self, chunks: Sequence[Chunk]) -> None:
        """Insert or replace ``chunks`` by id, in one transaction (last one wins for a
        repeated id); a chunk moved to another namespace leaves the old one."""
        items = list(chunks)
        if not items:
            return
        dimension = self._dimension
        vectors = []
        for chunk in items:
            vector = check_chunk(chunk, dimension)
            dimension = dimension or len(vector)
            vectors.append(vector)
        assert dimension is not None
        latest = {chunk.id: n for n, chunk in enumerate(items)}  # last write wins
        order = list(latest.values())
        matrix = self._normalised([vectors[n] for n in order])
        rows = [
            (items[n], namespace_key(items[n].metadata), matrix[i].tobytes())
            for i, n in enumerate(order)
        ]
        self._run(lambda conn: self._write(conn, rows, dimension))

    def _write(self, conn: Any, rows: list[tuple[Chunk, str, bytes]], dimension: int) -> None:
        from psycopg.types.json import Jsonb

        ids = [chunk.id for chunk, _, _ in rows]
        with conn.transaction():
            self._fix_dimension(conn, dimension)
            before = dict(conn.execute(self._q["where_now"], (ids,)).fetchall())
            new = {key for _, key, _ in rows}
            left = {before[c.id] for c, key, _ in rows if c.id in before and before[c.id] != key}
            gens = self._lock_namespaces(conn, new, left)
            params: list[tuple[Any, ...]] = [
                (c.id, key, c.text, Jsonb(c.metadata), vec, dimension, gens[key],
                 *keywords.postings(keyword_text(c), key))
                for c, key, vec in rows
            ]
            statement = self._q["upsert"]
            if self._pgvector:
                statement = self._q["upsert_pgvector"]
                params = [(*row, pgvector.literal(self._np.frombuffer(row[4], "float32"))) for row in params]
            with conn.cursor() as cursor:
                cursor.executemany(statement, params)

    def _lock_namespaces(self, conn: Any, written: set[str], removed: set[str]) -> dict[str, int]:
        """Take the namespace rows' locks in one order (no deadlock between writers):
        a new generation for each written namespace, a new epoch for each one that
        loses rows. Returns the generations."""
        gens = {}
        for key in sorted(written | removed):
            if key in removed:
                conn.execute(self._q["removed"], (key,))
            if key in written:
                gens[key] = int(conn.execute(self._q["bump"], (key,)).fetchone()[0])
        return gens

    def delete(self, ids: Sequence[str]) -> int:
        """Delete chunks by id, with their keyword postings and the cached embeddings
        of their texts; returns how many were there."""
        wanted = [check_text("chunk id", i) for i in id_list(ids, "delete")]
        if not wanted:
            return 0

        def run(conn: Any) -> int:
            with conn.transaction():
                found = conn.execute(self._q["where_now"], (wanted,)).fetchall()
                self._lock_namespaces(conn, set(), {key for _, key in found})
                gone = conn.execute(self._q["delete_rows"], (wanted,)).fetchall()
                if gone:
                    keys = [text_key(text) for _, text in gone]
                    conn.execute(self._q["forget_texts"], ([ns for ns, _ in gone], keys))
                return len(gone)

        return int(self._run(run))

    def delete_namespace(self, namespace: str) -> int:
        """Delete every chunk, keyword posting and cached embedding of ``namespace``;
        returns how many chunks there were."""
        wanted_keys(namespace, False)  # validates

        def run(conn: Any) -> int:
            with conn.transaction():
                # The namespace row goes too (nothing of a forgotten user stays); a
                # later add starts a new epoch, so no process keeps the old matrix.
                conn.execute(self._q["delete_ns"], (namespace,))
                deleted = int(conn.execute(self._q["delete_ns_rows"], (namespace,)).rowcount)
                conn.execute(self._q["delete_ns_cache"], (namespace,))
                return deleted

        deleted = int(self._run(run))
        with self._lock:
            self._matrices.pop(namespace)
        return deleted

    # -- search --------------------------------------------------------------

    def search_namespaces(
        self, vector: Sequence[float], top_k: int, keys: list[str] | None
    ) -> list[SearchHit]:
        """The ``top_k`` chunks closest by cosine, best first (see the module doc)."""
        dimension = self.dimension
        if dimension is None:
            return []
        query = self._normalised([check_vector(vector, dimension, "query vector")])[0]
        return list(self._run(lambda conn: self._search(conn, query, top_k, keys)))

    def _search(self, conn: Any, query: Any, top_k: int, keys: list[str] | None) -> list[SearchHit]:
        np = self._np
        if keys is None:
            keys = [row[0] for row in conn.execute(self._q["namespaces"])]
        if self._pgvector and len(keys) == 1:
            with self._lock:
                cold = keys[0] not in self._matrices
            if cold:
                return self._search_in_server(conn, query, top_k, keys[0])
        scored: list[tuple[float, str]] = []
        for key in keys:
            ids, vectors = self._refresh(conn, key)
            if not ids:
                continue
            # einsum, not BLAS: OpenBLAS wakes its threads for a matrix this size,
            # which costs ~10 ms on a busy machine between searches (measured).
            scores = np.einsum("ij,j->i", vectors, query)
            if len(scores) > top_k:
                best = np.argpartition(-scores, top_k - 1)[:top_k]
            else:
                best = np.arange(len(scores))
            scored += [(float(scores[i]), ids[i]) for i in best]
        return self._hits(conn, scored, top_k, keys)

    def _hits(
        self, conn: Any, scored: list[tuple[float, str]], top_k: int, keys: list[str]
    ) -> list[SearchHit]:
        """The ``top_k`` best of ``(score, id)`` as hits, read in one statement; rows
        removed since the scores were taken are left out (the namespace check too)."""
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        scored = scored[:top_k]
        if not scored:
            return []
        rows = conn.execute(self._q["hits"], ([i for _, i in scored], keys)).fetchall()
        found = {row[0]: Chunk(row[0], row[1], None, dict(row[2])) for row in rows}
        return [SearchHit(found[i], score) for score, i in scored if i in found]

    def search_spans(
        self,
        vector: Sequence[float],
        top_k: int,
        keys: list[str],
        spans: Sequence[tuple[float, float]],
    ) -> list[SearchHit]:
        """See :class:`~fastaiagent.facts.vectors.ListsRecorded`: the rows of the spans
        from the time index, ranked in this process's copy of the namespace (in the
        server with pgvector while the copy is cold)."""
        dimension = self.dimension
        if dimension is None:
            return []
        query = self._normalised([check_vector(vector, dimension, "query vector")])[0]
        bounds = ([float(a) for a, _ in spans], [float(b) for _, b in spans])
        return list(self._run(lambda conn: self._recorded(conn, query, top_k, keys, bounds)))

    def _recorded(
        self, conn: Any, query: Any, top_k: int, keys: list[str], bounds: tuple[list[float], ...]
    ) -> list[SearchHit]:
        np = self._np
        scored: list[tuple[float, str]] = []
        server: list[SearchHit] = []
        for key in keys:
            params = (*bounds, key, RECORDED_LIMIT + 1, RECORDED_LIMIT + 1)
            wanted = [row[0] for row in conn.execute(self._q["recorded"], params)]
            if not wanted or len(wanted) > RECORDED_LIMIT:
                continue
            with self._lock:
                cold = key not in self._matrices
            if self._pgvector and cold:  # as search does: no whole read on the caller's path
                text = pgvector.literal(query)
                found = (text, wanted, key, self._dimension, text, top_k)
                rows = conn.execute(self._q["server_search_ids"], found).fetchall()
                server += [SearchHit(Chunk(r[0], r[1], None, dict(r[2])), float(r[3])) for r in rows]
                self._warm(key)
                continue
            ids, vectors = self._refresh(conn, key)
            with self._lock:
                held = self._matrices.get(key)
            # The copy's id -> row map (one kept copy), else one of this snapshot.
            where = held.where if held is not None and held.ids is ids else None
            where = where if where is not None else {i: row for row, i in enumerate(ids)}
            n = 0 if vectors is None else len(vectors)
            rows_of = [row for i in wanted if (row := where.get(i, n)) < n]
            if rows_of:
                scores = np.einsum("ij,j->i", vectors[rows_of], query)
                scored += [(float(v), ids[row]) for v, row in zip(scores, rows_of, strict=True)]
        hits = self._hits(conn, scored, top_k, keys) + server
        hits.sort(key=lambda hit: -hit.score)
        return hits[:top_k]

    def _search_in_server(self, conn: Any, query: Any, top_k: int, key: str) -> list[SearchHit]:
        """A namespace this process holds no copy of: searched by pgvector in the
        server (no whole read on the caller's path), its copy loaded in the background."""
        text = pgvector.literal(query)
        params = (text, key, self._dimension, text, top_k)
        rows = conn.execute(self._q["server_search"], params).fetchall()
        self._warm(key)
        return [SearchHit(Chunk(r[0], r[1], None, dict(r[2])), float(r[3])) for r in rows]

    def holds_copy(self, namespace: str) -> bool:
        """Whether this process holds ``namespace``'s vectors in memory (searched here)."""
        with self._lock:
            return namespace in self._matrices

    def _warm(self, key: str) -> None:
        """Load ``key``'s matrix on a daemon thread (one at a time per namespace)."""
        with self._lock:
            if key in self._warming or key in self._too_big:
                return
            self._warming.add(key)

        def load() -> None:
            try:
                self._run(lambda conn: self._refresh(conn, key))
            except Exception as exc:  # the next search tries again
                logger.debug("loading the vectors of %r failed: %s", key, exc)
            finally:
                with self._lock:
                    self._warming.discard(key)

        threading.Thread(target=load, name="fastaiagent-pgvector-warm", daemon=True).start()

    def _refresh(self, conn: Any, key: str) -> tuple[list[str], Any]:
        """The namespace's ids and vectors (a consistent snapshot: rows ``[0, n)``),
        brought up to date by one indexed statement."""
        with self._lock:
            cached = self._matrices.get(key)
        epoch, gen = (cached.epoch, cached.gen) if cached is not None else (_NONE, 0)
        rows = conn.execute(self._q["refresh"], (self._dimension, epoch, gen, key)).fetchall()
        with self._lock:
            if not rows:  # no such namespace (or it was forgotten)
                self._matrices.pop(key)
                return [], None
            matrix = self._merge(key, rows, cached)
            n = len(matrix.ids)
            return matrix.ids, matrix.buffer[:n]

    def _merge(self, key: str, rows: list[Any], read: _Matrix | None) -> _Matrix:
        """Apply a refresh's rows (caller holds the lock). A thread that refreshed
        meanwhile may have got further: its matrix is kept."""
        np = self._np
        new_gen, new_epoch = int(rows[0][0]), int(rows[0][1])
        current = self._matrices.get(key)
        if current is not None and current.epoch == new_epoch and current.gen >= new_gen:
            self._matrices.touch(key)
            return current
        if read is None or read.epoch != new_epoch:  # the rows are the whole namespace
            base = _Matrix(new_gen, new_epoch, np.empty((0, self._dimension), "float32"), [], {})
        elif current is not None and current.epoch == new_epoch and current.gen >= read.gen:
            base = current  # the rows since read.gen cover whatever current lacks
        else:
            base = read
        live = [row for row in rows if row[2] is not None]
        vectors = np.frombuffer(b"".join(row[3] for row in live), dtype="float32")
        base.merge(np, [row[2] for row in live], vectors.reshape(len(live), self._dimension))
        base.gen, base.epoch = new_gen, new_epoch
        self._keep(key, base)
        return base

    def _keep(self, key: str, matrix: _Matrix) -> None:
        """Hold ``matrix`` (caller holds the lock), evicting the least recently used."""
        if not self._matrices.put(key, matrix):  # too big to keep: searched, then dropped
            self._too_big.add(key)  # with pgvector: searched in the server, never loaded again

    def keyword_search(self, query: str, top_k: int, *, namespace: str) -> list[tuple[str, float]]:
        """``(chunk id, score)`` of the best BM25 keyword matches in ``namespace``
        (any keyword matches; scored with the namespace's own statistics, see
        :mod:`fastaiagent.facts.postgres.keywords`), best first."""
        check_top_k(top_k)
        check_text("query", query, allow_empty=True)
        wanted_keys(namespace, False)
        return list(self._run(lambda conn: keywords.search(conn, self._q, query, top_k, namespace)))

    # -- reads ---------------------------------------------------------------

    def ids(self, namespace: str) -> set[str]:
        """Every chunk id ``namespace`` holds."""
        wanted_keys(namespace, False)
        rows = self._run(lambda conn: conn.execute(self._q["ids"], (namespace,)).fetchall())
        return {row[0] for row in rows}

    def get(self, ids: Sequence[str]) -> list[Chunk]:
        """The chunks with these ids that exist, in the order asked (without vectors)."""
        wanted = id_list(ids, "get")
        if not wanted:
            return []
        rows = self._run(lambda conn: conn.execute(self._q["rows"], (wanted,)).fetchall())
        found = {row[0]: row for row in rows}
        return [Chunk(i, found[i][1], None, dict(found[i][2])) for i in wanted if i in found]

    def chunks(self, namespace: str | None, *, include_untagged: bool = False) -> list[Chunk]:
        """Every chunk of a namespace (``None``: all), without vectors."""
        keys = wanted_keys(namespace, include_untagged)
        where = "TRUE" if keys is None else "namespace = ANY(%s)"
        query = sql.SQL("SELECT id, text, metadata FROM {} WHERE " + where + " ORDER BY id").format(
            sql.Identifier(self.table)
        )
        params = () if keys is None else (keys,)
        rows = self._run(lambda conn: conn.execute(query, params).fetchall())
        return [Chunk(row[0], row[1], None, dict(row[2])) for row in rows]

    def count(self, namespace: str | None = None) -> int:
        """How many chunks the index (or one namespace) holds."""
        keys = wanted_keys(namespace, False)
        where = "TRUE" if keys is None else "namespace = %s"
        query = sql.SQL("SELECT count(*) FROM {} WHERE " + where).format(sql.Identifier(self.table))
        params = () if keys is None else (namespace,)
        return int(self._run(lambda conn: conn.execute(query, params).fetchone()[0]))

    # -- embedding cache -------------------------------------------------------

    def cached_embeddings(
        self, identity: str, namespace: str, keys: Sequence[str]
    ) -> dict[str, list[float]]:
        """Cached vectors of ``identity`` for these text keys in ``namespace``."""
        check_text("identity", identity)
        wanted_keys(namespace, False)
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        params = (namespace, identity, wanted)
        rows = self._run(lambda conn: conn.execute(self._q["cached"], params).fetchall())
        frombuffer = self._np.frombuffer
        return {row[0]: frombuffer(row[1], dtype="float32").tolist() for row in rows}

    def cache_embeddings(
        self, identity: str, namespace: str, vectors: Mapping[str, Sequence[float]]
    ) -> None:
        """Remember vectors of ``identity`` by text key in ``namespace`` (one batch)."""
        check_text("identity", identity)
        wanted_keys(namespace, False)
        params = [
            (namespace, identity, check_text("text key", key), self._np.asarray(
                check_vector(vector, None, f"embedding {key!r}"), dtype="float32").tobytes())
            for key, vector in vectors.items()
        ]
        if not params:
            return

        def run(conn: Any) -> None:
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(self._q["cache"], params)

        self._run(run)

    def close(self) -> None:
        """Drop the in-memory matrices (the connections belong to the fact store)."""
        with self._lock:
            self._matrices.clear()


def _run_ddl(conn: Any, ddl: list[Any], transaction: bool = True) -> None:
    """One schema step, in one transaction unless ``transaction`` is False (under the
    table's advisory lock, see facts/schema.py)."""
    if not transaction:  # CREATE INDEX CONCURRENTLY cannot run inside one
        for statement in ddl:
            conn.execute(statement)
        return
    with conn.transaction():
        for statement in ddl:
            conn.execute(statement)
