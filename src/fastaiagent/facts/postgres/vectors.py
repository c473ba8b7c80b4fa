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
- ``<t>_vector_meta``: the index's dimension, fixed by the first add, and the text
  analyzer's version its postings were built with (:mod:`fastaiagent.facts.index.reindex`).

Search is exact cosine over one namespace with numpy: each process keeps the
namespace's matrix in memory (LRU, within the process's budget) and checks it
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
from functools import partial
from typing import Any

from fastaiagent._optional import require
from fastaiagent._validate import boolean, integer
from fastaiagent._validate import text as check_text
from fastaiagent.errors import InvalidTypeError
from fastaiagent.facts.index.front import MatrixIndex, bytes_vector, ranked_hits
from fastaiagent.facts.index.matrix import Change, NamespaceMatrix, unit_rows
from fastaiagent.facts.index.reindex import analyzer_opened, current_version
from fastaiagent.facts.postgres import keywords, pgvector
from fastaiagent.facts.postgres.store import PostgresFactStore, redacted_url, sql
from fastaiagent.facts.schema import Schema, migrate_postgres, run_ddl
from fastaiagent.facts.vectors import RECORDED_LIMIT, Spans, text_key
from fastaiagent.kb.protocols import Chunk, Dimension, SearchHit, checked_batch

logger = logging.getLogger("fastaiagent.facts.postgres.vectors")

DROP_STEP = 1000  # rows one step of a namespace delete removes, each its own transaction
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
    "record_dimension": "INSERT INTO {m} (name, value) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING",
    "recorded_dimensions": "SELECT value FROM {m} WHERE starts_with(name, 'dimension:')",
    "analyzer": "SELECT value FROM {m} WHERE name = 'analyzer'",
    "record_analyzer": "INSERT INTO {m} (name, value) VALUES ('analyzer', %s) ON CONFLICT (name) DO NOTHING",
    "write_analyzer": "INSERT INTO {m} (name, value) VALUES ('analyzer', %s) "
    "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
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
    "holds": "SELECT 1 FROM {v} WHERE namespace = %s LIMIT 1",
    "namespaces": "SELECT namespace FROM {n}",
    "delete_rows": "DELETE FROM {v} WHERE id = ANY(%s) RETURNING namespace, text",
    "forget_texts": "DELETE FROM {e} WHERE (namespace, text_key) IN "
    "(SELECT * FROM unnest(%s::text[], %s::text[]))",
    # A step of a namespace delete: at most %s rows, so no transaction holds many locks.
    "delete_ns_rows": "DELETE FROM {v} WHERE ctid = ANY(ARRAY("
    "SELECT ctid FROM {v} WHERE namespace = %s LIMIT %s))",
    "delete_ns_cache": "DELETE FROM {e} WHERE ctid = ANY(ARRAY("
    "SELECT ctid FROM {e} WHERE namespace = %s LIMIT %s))",
    "delete_ns": "DELETE FROM {n} WHERE namespace = %s",
    "cached": "SELECT text_key, vector FROM {e} WHERE namespace = %s AND identity = %s "
    "AND text_key = ANY(%s)",
    "uncache": "DELETE FROM {e} WHERE namespace = %s AND text_key = ANY(%s)",
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
        "terms": sql.Identifier(f"{fact_table}_vector_terms"),
        "terms_fn": sql.Identifier(f"{v}_kw_terms"),
        "terms_trigger": sql.Identifier(f"{v}_kw_terms"),
        "newest_fn": sql.Identifier(f"{v}_newest"),
    }


class PostgresVectorIndex(MatrixIndex):
    """The :class:`~fastaiagent.facts.vectors.StoredVectorIndex` in a
    :class:`~fastaiagent.facts.postgres.store.PostgresFactStore`'s database (see the module doc).

    Thread-safe, and safe across processes and hosts: each search checks its
    in-memory copy of the namespace against the database first. ``dimension``
    fixes the size up front (None: the first add, in any process, fixes it).
    The namespace matrices kept in memory (LRU) share the process's budget
    (:data:`fastaiagent.facts.index.matrix.CACHE_BYTES`), or with
    ``cache_bytes`` have one of this index's own. ``pgvector``: None uses the
    ``vector`` extension when the server has it, True requires it, False never uses it. ``base``: the name the tables are
    named after (``<base>_vectors``, ...; default: the fact table's). Errors
    of the server are classified as the fact store's are
    (:class:`~fastaiagent.errors.StoreUnavailableError` for an outage). Needs numpy.
    """

    def __init__(
        self,
        store: PostgresFactStore,
        *,
        dimension: int | None = None,
        cache_bytes: int | None = None,
        pgvector: bool | None = None,
        base: str | None = None,
    ) -> None:
        if not isinstance(store, PostgresFactStore):
            raise InvalidTypeError(
                f"PostgresVectorIndex needs a PostgresFactStore, got {type(store).__name__}"
            )
        self._sizes = Dimension(dimension, "another fact table")
        self.cache_bytes = None if cache_bytes is None else integer("cache_bytes", cache_bytes, minimum=0)
        super().__init__(self.cache_bytes)
        self._asked_pgvector = None if pgvector is None else boolean("pgvector", pgvector)
        self._pgvector = False
        self._warming: set[str] = set()  # namespaces whose copy loads in the background
        self._np = require("numpy", "postgres")
        self.store = store
        self.base = store.table if base is None else check_text("base", base)
        self.table = vectors_table_for(self.base)
        names = _names(self.base)
        queries = {**_QUERIES, **keywords.QUERIES}
        self._q = {k: sql.SQL(text).format(**names) for k, text in queries.items()}
        steps = [[sql.SQL(text).format(**names) for text in ddl] for ddl in (_DDL, keywords.STEP2, _STEP3)]
        # Step 3 builds CONCURRENTLY, outside a transaction: a busy table's writers go on.
        runs: list[Any] = [partial(_run_ddl, ddl=ddl, transaction=n < 2) for n, ddl in enumerate(steps)]
        update = sql.SQL(keywords.RETOKENIZE).format(**names)
        cjk, every = (sql.SQL(rows).format(**names) for rows in (keywords.CJK_ROWS, keywords.ALL_ROWS))
        runs.append(partial(_in_transaction, step=partial(keywords.retokenize_cjk, rows_query=cjk, update=update)))
        terms = [sql.SQL(text).format(**names) for text in keywords.STEP5]
        runs.append(partial(_run_ddl, ddl=terms))  # one transaction: writers wait for the count
        restem = [sql.SQL(text).format(**names) for text in keywords.RESTEM_APPLY]
        runs.append(partial(keywords.restem, rows_query=every, apply=restem))
        self._schema = Schema(f"vectors:{self.table}", runs)
        self._ready = False
        self._dimension: int | None = None
        self._fixed = False  # whether the database holds self._dimension
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PostgresVectorIndex(table={self.table!r})"

    # -- connections and metadata ------------------------------------------

    def _run(self, operation: Any) -> Any:
        """``operation(conn)`` through the fact store's pool and error handling."""

        def run(conn: Any) -> Any:
            if not self._ready:
                where = f"the database at {redacted_url(self.store.url)}"
                with self.store.schema_work(conn):
                    migrate_postgres(conn, self._schema, self.table, where)
                    self._pgvector = pgvector.enable(conn, self.table, self._asked_pgvector, where)
                    self._load_dimension(conn)
                    recorded = conn.execute(self._q["analyzer"]).fetchone()
                self._ready = True
                if analyzer_opened(self, None if recorded is None else int(recorded[0])) == "record":
                    self._record_analyzer(conn)
            return operation(conn)

        return self.store._run(run)

    def _load_dimension(self, conn: Any) -> None:
        row = conn.execute(self._q["dimension"]).fetchone()
        found = None if row is None else int(row[0])
        self._dimension = self._sizes.agreed(found, f"the vector index {self.table!r}")
        self._fixed = found is not None

    def _fix_dimension(self, conn: Any, size: int) -> None:
        """Record ``size`` as the dimension, or raise if the database has another."""
        if self._fixed and self._dimension == size:
            return
        conn.execute(self._q["fix_dimension"], (size,))
        self._load_dimension(conn)
        if self._dimension != size:
            raise self._sizes.refused(size, self._dimension)

    # -- indexes of other sizes beside this one (StoreCapabilities.vector_store) --

    def beside(self, size: int) -> PostgresVectorIndex:
        """The index of ``size``-dimensional vectors next to this one, in the tables
        named after ``<base>_d<size>`` (``<base>_d<size>_vectors``, ...)."""
        return PostgresVectorIndex(
            self.store, base=f"{self.base}_d{size}", cache_bytes=self.cache_bytes,
            pgvector=self._asked_pgvector,
        )  # fmt: skip

    def claim_dimension(self, size: int) -> int:
        """Fix ``size`` as the dimension unless the index already has one (in any
        process); returns the dimension it has now."""

        def run(conn: Any) -> int:
            conn.execute(self._q["fix_dimension"], (size,))
            self._load_dimension(conn)
            return int(self._dimension or size)

        return int(self._run(run))

    def record_dimension(self, size: int) -> None:
        """Note in the database that an index of ``size`` lives beside this one, so
        every process finds it (:meth:`recorded_dimensions`)."""
        self._run(lambda conn: conn.execute(self._q["record_dimension"], (f"dimension:{size}", size)))

    def recorded_dimensions(self) -> list[int]:
        """The sizes :meth:`record_dimension` noted, by any process."""
        rows = self._run(lambda conn: conn.execute(self._q["recorded_dimensions"]).fetchall())
        return sorted(int(row[0]) for row in rows)

    def _record_analyzer(self, conn: Any) -> None:
        """Record today's analyzer version where none is (a read-only role still reads)."""
        try:
            with conn.transaction():  # a refusal rolls back to here, the connection stays usable
                conn.execute(self._q["record_analyzer"], (current_version(),))
        except Exception as exc:
            logger.debug("analyzer version of %r not recorded: %s", self, exc)

    def write_analyzer(self, version: int) -> None:
        self._run(lambda conn: conn.execute(self._q["write_analyzer"], (version,)))

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

    # -- writes --------------------------------------------------------------

    def add(self, chunks: Sequence[Chunk]) -> None:
        """Insert or replace ``chunks`` by id, in one transaction (last one wins for a
        repeated id); a chunk moved to another namespace leaves the old one."""
        batch = checked_batch(chunks, self._dimension)
        if batch is None:
            return
        dimension = batch.dimension
        matrix = unit_rows(batch.vectors)
        rows = [
            (chunk, key, vector.tobytes())
            for chunk, key, vector in zip(batch.chunks, batch.keys, matrix, strict=True)
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
                 *keywords.postings(c, key))
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

    def delete_ids(self, ids: list[str]) -> int:
        """Delete chunks by id, with their keyword postings and the cached embeddings
        of their texts; returns how many were there."""
        wanted = [check_text("chunk id", i) for i in ids]

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

    def delete_namespace_rows(self, namespace: str) -> int:
        def run(conn: Any) -> int:
            # The namespace row goes first (nothing of a forgotten user stays); a
            # later add starts a new epoch, so no process keeps the old matrix.
            with conn.transaction():
                conn.execute(self._q["delete_ns"], (namespace,))
            deleted = 0
            for query in ("delete_ns_rows", "drop_terms", "delete_ns_cache"):
                while True:  # each step its own transaction (autocommit)
                    gone = int(conn.execute(self._q[query], (namespace, DROP_STEP)).rowcount)
                    deleted += gone if query == "delete_ns_rows" else 0
                    if gone < DROP_STEP:
                        break
            return deleted

        return int(self._run(run))

    # -- search --------------------------------------------------------------

    def rank_namespaces(self, query: Any, top_k: int, keys: list[str] | None) -> list[SearchHit]:
        """Exact search in this process's copies (see the module doc)."""
        return list(self._run(lambda conn: self._search(conn, query, top_k, keys)))

    def _search(self, conn: Any, query: Any, top_k: int, keys: list[str] | None) -> list[SearchHit]:
        if keys is None:
            keys = [row[0] for row in conn.execute(self._q["namespaces"])]
        if self._pgvector and len(keys) == 1 and keys[0] not in self.copies:
            return self._search_in_server(conn, query, top_k, keys[0])
        found = []
        for key in keys:
            view = self.current(key, conn)
            found += view.top(query, top_k) if view is not None else []
        return self._hits(conn, found, top_k, keys)

    def _hits(self, conn: Any, found: list[Any], top_k: int, keys: list[str]) -> list[SearchHit]:
        """Hits read in one statement (the namespace checked again): ties by id, as the
        server orders them."""

        def fetch(ids: list[str]) -> dict[str, Chunk]:
            rows = conn.execute(self._q["hits"], (ids, keys)).fetchall()
            return {row[0]: Chunk(row[0], row[1], None, dict(row[2])) for row in rows}

        return ranked_hits(found, top_k, fetch, ties_by_key=True)

    def rank_spans(self, query: Any, top_k: int, keys: list[str], spans: Spans) -> list[SearchHit]:
        """The rows of the spans from the time index, ranked in this process's copy of
        the namespace (in the server with pgvector while the copy is cold)."""
        bounds = ([float(a) for a, _ in spans], [float(b) for _, b in spans])
        return list(self._run(lambda conn: self._recorded(conn, query, top_k, keys, bounds)))

    def _recorded(
        self, conn: Any, query: Any, top_k: int, keys: list[str], bounds: tuple[list[float], ...]
    ) -> list[SearchHit]:
        found = []
        server: list[SearchHit] = []
        for key in keys:
            params = (*bounds, key, RECORDED_LIMIT + 1, RECORDED_LIMIT + 1)
            wanted = [row[0] for row in conn.execute(self._q["recorded"], params)]
            if not wanted or len(wanted) > RECORDED_LIMIT:
                continue
            if self._pgvector and key not in self.copies:  # as search: no whole read here
                text = pgvector.literal(query)
                params = (text, wanted, key, self._dimension, text, top_k)
                server += self._server_hits(conn.execute(self._q["server_search_ids"], params))
                self._warm(key)
                continue
            view = self.current(key, conn)
            found += view.among(wanted, query) if view is not None else []
        hits = self._hits(conn, found, top_k, keys) + server
        hits.sort(key=lambda hit: -hit.score)
        return hits[:top_k]

    @staticmethod
    def _server_hits(cursor: Any) -> list[SearchHit]:
        return [SearchHit(Chunk(r[0], r[1], None, dict(r[2])), float(r[3])) for r in cursor.fetchall()]

    def _search_in_server(self, conn: Any, query: Any, top_k: int, key: str) -> list[SearchHit]:
        """A namespace this process holds no copy of: searched by pgvector in the
        server (no whole read on the caller's path), its copy loaded in the background."""
        text = pgvector.literal(query)
        params = (text, key, self._dimension, text, top_k)
        hits = self._server_hits(conn.execute(self._q["server_search"], params))
        self._warm(key)
        return hits

    def holds_copy(self, namespace: str) -> bool:
        """Whether this process holds ``namespace``'s vectors in memory (searched here)."""
        return namespace in self.copies

    def _warm(self, key: str) -> None:
        """Load ``key``'s matrix on a daemon thread (one at a time per namespace)."""
        with self._lock:
            if key in self._warming or key in self.copies.too_big:
                return
            self._warming.add(key)

        def load() -> None:
            try:
                self._run(lambda conn: self.current(key, conn))
            except Exception as exc:  # the next search tries again
                logger.debug("loading the vectors of %r failed: %s", key, exc)
            finally:
                with self._lock:
                    self._warming.discard(key)

        threading.Thread(target=load, name="fastaiagent-pgvector-warm", daemon=True).start()

    def report_change(self, conn: Any, key: str, held: NamespaceMatrix | None) -> Change | None:
        """What changed in ``key`` since ``held``, in one indexed statement: the rows
        written since its generation, or every row when the epoch moved (a removal)."""
        epoch, gen = (held.epoch, held.version) if held is not None else (_NONE, 0)
        # Binary results: a vector's bytea travels as its bytes, not as hex text to
        # decode (a cold read of 100k x 384 took 1.1-1.7 s in text, 0.5 s binary).
        with conn.cursor(binary=True) as cursor:
            rows = cursor.execute(self._q["refresh"], (self._dimension, epoch, gen, key)).fetchall()
        if not rows:  # no such namespace (or it was forgotten)
            return None
        new_gen, new_epoch = int(rows[0][0]), int(rows[0][1])
        live = [row for row in rows if row[2] is not None]
        vectors = self._np.frombuffer(b"".join(row[3] for row in live), dtype="float32")
        since = gen if held is not None and held.epoch == new_epoch else None
        return Change(
            new_gen, new_epoch, since, [row[2] for row in live],
            vectors.reshape(len(live), self._dimension or 1),
        )

    def score_keywords(self, terms: list[str], top_k: int, namespace: str) -> list[tuple[str, float]]:
        """Any keyword matches; scored with the namespace's own statistics (see
        :mod:`fastaiagent.facts.postgres.keywords`)."""
        return list(self._run(lambda conn: keywords.search(conn, self._q, terms, top_k, namespace)))

    # -- reads ---------------------------------------------------------------

    def holds(self, namespace: str) -> bool:
        """One row of the namespace index, not a count of every one."""
        return bool(self._run(lambda conn: conn.execute(self._q["holds"], (namespace,)).fetchone()))

    def read_ids(self, namespace: str) -> set[str]:
        rows = self._run(lambda conn: conn.execute(self._q["ids"], (namespace,)).fetchall())
        return {row[0] for row in rows}

    def read_chunks(self, ids: list[str]) -> dict[str, Chunk]:
        rows = self._run(lambda conn: conn.execute(self._q["rows"], (ids,)).fetchall())
        return {row[0]: Chunk(row[0], row[1], None, dict(row[2])) for row in rows}

    def read_vector_page(self, namespace: str, after: Any, limit: int) -> tuple[list[Chunk], Any]:
        """Keyset pages by (gen, id), along the namespace's index."""
        query = sql.SQL(
            "SELECT gen, id, text, metadata, vector FROM {} WHERE namespace = %s "
            "AND (gen, id) > (%s, %s) ORDER BY gen, id LIMIT %s"
        ).format(sql.Identifier(self.table))
        gen, last = after or (-1, "")
        def read(conn: Any) -> list[Any]:
            with conn.cursor(binary=True) as cursor:  # the vectors as bytes, not hex
                return cursor.execute(query, (namespace, gen, last, limit)).fetchall()

        rows = self._run(read)
        chunks = [Chunk(row[1], row[2], bytes_vector(row[4]), dict(row[3])) for row in rows]
        return chunks, ((rows[-1][0], rows[-1][1]) if len(rows) == limit else None)

    def read_newest(self, namespace: str, limit: int, offset: int) -> list[Chunk]:
        """Newest first by the recorded time, a missing one last."""
        query = sql.SQL(
            "SELECT id, text, metadata FROM {} WHERE namespace = %s "
            f"ORDER BY {_RECORDED} DESC NULLS LAST, gen DESC, id DESC LIMIT %s OFFSET %s"
        ).format(sql.Identifier(self.table))
        params = (namespace, limit, offset)
        rows = self._run(lambda conn: conn.execute(query, params).fetchall())
        return [Chunk(row[0], row[1], None, dict(row[2])) for row in rows]

    def read_namespace_counts(self) -> list[tuple[str, int]]:
        query = sql.SQL("SELECT namespace, count(*) FROM {} GROUP BY namespace").format(
            sql.Identifier(self.table)
        )
        return [(row[0], int(row[1])) for row in self._run(lambda conn: conn.execute(query).fetchall())]

    def read_namespace_names(self) -> list[str]:
        query = sql.SQL("SELECT DISTINCT namespace FROM {}").format(sql.Identifier(self.table))
        return [row[0] for row in self._run(lambda conn: conn.execute(query).fetchall())]

    def read_namespaces(self, keys: list[str] | None) -> list[Chunk]:
        """By id."""
        where = "TRUE" if keys is None else "namespace = ANY(%s)"
        query = sql.SQL("SELECT id, text, metadata FROM {} WHERE " + where + " ORDER BY id").format(
            sql.Identifier(self.table)
        )
        params = () if keys is None else (keys,)
        rows = self._run(lambda conn: conn.execute(query, params).fetchall())
        return [Chunk(row[0], row[1], None, dict(row[2])) for row in rows]

    def count_rows(self, namespace: str | None) -> int:
        where = "TRUE" if namespace is None else "namespace = %s"
        query = sql.SQL("SELECT count(*) FROM {} WHERE " + where).format(sql.Identifier(self.table))
        params = () if namespace is None else (namespace,)
        return int(self._run(lambda conn: conn.execute(query, params).fetchone()[0]))

    # -- embedding cache -------------------------------------------------------

    def read_cache(self, identity: str, namespace: str, keys: list[str]) -> list[tuple[str, bytes]]:
        params = (namespace, identity, keys)
        return list(self._run(lambda conn: conn.execute(self._q["cached"], params).fetchall()))

    def delete_cache(self, namespace: str, keys: list[str]) -> None:
        self._run(lambda conn: conn.execute(self._q["uncache"], (namespace, keys)))

    def write_cache(self, identity: str, namespace: str, blobs: Mapping[str, bytes]) -> None:
        params = [(namespace, identity, key, blob) for key, blob in blobs.items()]

        def run(conn: Any) -> None:
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(self._q["cache"], params)

        self._run(run)


def _in_transaction(conn: Any, step: Any) -> None:
    with conn.transaction():
        step(conn)


def _run_ddl(conn: Any, ddl: list[Any], transaction: bool = True) -> None:
    """One schema step, in one transaction unless ``transaction`` is False (under the
    table's advisory lock, see facts/schema.py)."""
    if not transaction:  # CREATE INDEX CONCURRENTLY cannot run inside one
        for statement in ddl:
            run_ddl(conn, statement)  # plain, inside a pooler's transaction
        return
    with conn.transaction():
        for statement in ddl:
            conn.execute(statement)
