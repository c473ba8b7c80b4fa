"""Durable vectors, keyword postings and cached embeddings in the fact store's SQLite file.

The tables and their migrations are in ``vectors_schema``: chunks, their
vectors clustered by namespace, FTS5 keyword postings (sealed per namespace:
``sealed_keywords``) with per-namespace BM25 statistics, cached embeddings, and
per-namespace change generations that let a process keep a namespace's matrix
in memory and check it with one indexed read.

Search is exact cosine over one namespace with numpy (a per-user namespace is
small; see docs/research/recall-speed.md for where an ANN index takes over), in the namespace
matrices of :mod:`fastaiagent.facts.index.matrix`, behind the shared front of
:mod:`fastaiagent.facts.index.front`.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from fastaiagent._io import decode_own_json
from fastaiagent._optional import require
from fastaiagent._validate import integer
from fastaiagent.errors import InvalidTypeError
from fastaiagent.facts.index.front import MatrixIndex, bytes_vector, ranked_hits
from fastaiagent.facts.index.keywords import bm25_top, budget, by_rarity
from fastaiagent.facts.index.matrix import Change, MatrixView, NamespaceMatrix, unit_rows
from fastaiagent.facts.index.reindex import analyzer_opened, current_version
from fastaiagent.facts.sqlite.sealed_keywords import (
    NamespaceSecrets,
    namespace_token,
    seal,
    sealed_text,
)
from fastaiagent.facts.sqlite.store import SQLiteFactStore, SQLiteTable, WriteSteps
from fastaiagent.facts.sqlite.vectors_schema import RECORDED, fts_match, vectors_schema
from fastaiagent.facts.vectors import RECORDED_LIMIT, Spans, keyword_tokens
from fastaiagent.kb.protocols import Batch, Chunk, Dimension, SearchHit, checked_batch

logger = logging.getLogger("fastaiagent.facts.sqlite.vectors")

DEFAULT_TABLE = "memory_vectors"
_MAX_PARAMS = 500  # ids per IN (...) list
_SPANS_PER_STATEMENT = 100  # SQLite allows 500 terms in a compound SELECT


def _batches(items: Sequence[Any], size: int = _MAX_PARAMS) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class SQLiteVectorIndex(SQLiteTable, MatrixIndex):
    """The :class:`~fastaiagent.facts.vectors.StoredVectorIndex` in a
    :class:`~fastaiagent.facts.sqlite.store.SQLiteFactStore` file (see the module doc).

    Thread-safe (per-thread connections; writes are ``BEGIN IMMEDIATE``
    transactions) and safe across processes sharing the file: each search
    checks its in-memory copy of the namespace against the file first.
    ``dimension`` fixes the size up front (None: the first add fixes it);
    The namespace matrices kept in memory (LRU) share the process's budget
    (:data:`fastaiagent.facts.index.matrix.CACHE_BYTES`), or with
    ``cache_bytes`` have one of this index's own. Needs numpy.
    """

    def __init__(
        self,
        store: SQLiteFactStore,
        *,
        table: str = DEFAULT_TABLE,
        dimension: int | None = None,
        cache_bytes: int | None = None,
    ) -> None:
        SQLiteTable.__init__(self, store, table, vectors_schema(table))
        self._sizes = Dimension(dimension, "another table")
        self.cache_bytes = None if cache_bytes is None else integer("cache_bytes", cache_bytes, minimum=0)
        MatrixIndex.__init__(self, self.cache_bytes)
        self._secrets = NamespaceSecrets(table)
        self._np = require("numpy", "local")
        self._dimension: int | None = None
        self._analyzer_seen = False

    # -- connections and metadata ------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn = super()._conn()
        if self._sizes.asked is not None:
            self._check_asked(conn)
        if not self._analyzer_seen:
            self._analyzer_seen = True
            self._open_analyzer(conn)
        return conn

    def _open_analyzer(self, conn: sqlite3.Connection) -> None:
        """The first use: the recorded analyzer version checked (see ``reindex``)."""
        row = conn.execute(f"SELECT value FROM {self.table}_meta WHERE name = 'analyzer'").fetchone()
        if analyzer_opened(self, None if row is None else int(row[0])) == "record":
            try:
                with self.store._table_write() as write:
                    write.execute(
                        f"INSERT OR IGNORE INTO {self.table}_meta (name, value) VALUES ('analyzer', ?)",
                        (current_version(),),
                    )
            except Exception as exc:  # a read-only file still reads; the next open records it
                logger.debug("analyzer version of %r not recorded: %s", self, exc)

    def write_analyzer(self, version: int) -> None:
        self._conn()
        with self.store._table_write() as conn:
            conn.execute(
                f"INSERT INTO {self.table}_meta (name, value) VALUES ('analyzer', ?) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value", (version,),
            )  # fmt: skip

    def _check_asked(self, conn: sqlite3.Connection) -> None:
        where = f"the vector index {self.table!r} in {str(self.store.path)!r}"
        self._sizes.agreed(self._stored_dimension(conn), where)

    def _stored_dimension(self, conn: sqlite3.Connection) -> int | None:
        row = conn.execute(
            f"SELECT value FROM {self.table}_meta WHERE name = 'dimension'"
        ).fetchone()
        return int(row[0]) if row else None

    @property
    def dimension(self) -> int | None:
        """The vector size: fixed by the constructor or the first add (in any process)."""
        if self._dimension is None:
            self._dimension = self._stored_dimension(self._conn()) or self._sizes.asked
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
            raise self._sizes.refused(size, stored)
        self._dimension = size

    # -- indexes of other sizes beside this one (StoreCapabilities.vector_store) --

    def beside(self, size: int) -> SQLiteVectorIndex:
        """The index of ``size``-dimensional vectors next to this one, in the table
        ``<table>_d<size>`` of the same file (made on first use)."""
        return SQLiteVectorIndex(self.store, table=f"{self.table}_d{size}", cache_bytes=self.cache_bytes)

    def claim_dimension(self, size: int) -> int:
        """Fix ``size`` as the dimension unless the index already has one (in any
        process); returns the dimension it has now."""
        self._conn()
        with self.store._table_write() as conn:
            conn.execute(
                f"INSERT OR IGNORE INTO {self.table}_meta (name, value) VALUES ('dimension', ?)",
                (size,),
            )
            stored = self._stored_dimension(conn)
        self._dimension = stored
        return int(stored or size)

    def record_dimension(self, size: int) -> None:
        """Note in the file that an index of ``size`` lives beside this one, so every
        process finds it (:meth:`recorded_dimensions`)."""
        self._conn()
        with self.store._table_write() as conn:
            conn.execute(
                f"INSERT OR IGNORE INTO {self.table}_meta (name, value) VALUES (?, ?)",
                (f"dimension:{size}", size),
            )

    def recorded_dimensions(self) -> list[int]:
        """The sizes :meth:`record_dimension` noted, by any process."""
        rows = self._conn().execute(
            f"SELECT value FROM {self.table}_meta WHERE name LIKE 'dimension:%'"
        ).fetchall()
        return sorted(int(row[0]) for row in rows)

    # -- writes ------------------------------------------------------------

    def _rows(self, batch: Batch) -> list[tuple[Any, ...]]:
        """Insert rows of a checked batch (its vectors L2-normalised), with the keyword
        tokens still a list: they are sealed inside the write (see :meth:`add`)."""
        rows = []
        for chunk, key, vector in zip(
            batch.chunks, batch.keys, unit_rows(batch.vectors), strict=True
        ):
            try:
                metadata = json.dumps(chunk.metadata, ensure_ascii=False)
            except (TypeError, ValueError) as exc:
                raise InvalidTypeError(
                    f"chunk {chunk.id!r} metadata must be JSON-serialisable: {exc}"
                ) from exc
            rows.append(
                (
                    chunk.id,
                    key,
                    keyword_tokens(chunk),
                    chunk.text,
                    metadata,
                    batch.dimension,
                    vector.tobytes(),
                )
            )
        return rows

    def add(self, chunks: Sequence[Chunk]) -> None:
        """Insert or replace ``chunks`` by id (vectors, keyword postings: one transaction)."""
        batch = checked_batch(chunks, self.dimension)
        if batch is None:
            return
        rows = self._rows(batch)
        self._conn()
        t = self.table
        with self.store._table_write() as conn:
            self._fix_dimension(conn, batch.dimension)
            generation = self._next_generation(conn)
            removed = self._remove(conn, [row[0] for row in rows])
            insert = (
                f"INSERT INTO {t} (id, namespace, nskey, text, keywords, metadata, dimension) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING rid"
            )
            secrets = self._secrets.for_write(conn, {row[1] for row in rows})
            vectors = []
            for chunk_id, key, words, text, metadata, dimension, vector in rows:
                secret = secrets[key]
                (rid,) = conn.execute(insert, (
                    chunk_id, key, namespace_token(secret), text, sealed_text(secret, words),
                    metadata, dimension,
                )).fetchone()  # fmt: skip
                vectors.append((key, rid, vector))
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
                self._secrets.drop(conn, namespace)

    def delete_ids(self, ids: list[str]) -> int:
        """Delete chunks by id (vectors and keyword postings); returns how many were there."""
        self._conn()
        with self.store._table_write() as conn:
            removed = self._remove(conn, ids)
            if not removed:
                return 0
            generation = self._next_generation(conn)
            prior = self._prior(conn, set(removed))
            self._mark(conn, generation, set(), removed)
        self._apply_own(generation, prior, removed, [])
        return sum(len(rids) for rids in removed.values())

    def delete_namespace_rows(self, namespace: str) -> int:
        """Delete every chunk, keyword posting and cached embedding of ``namespace``
        in steps of a few ms (:class:`WriteSteps`), each its own write transaction
        (a 100k-message user held the write lock for 20 s in one), then its secret:
        the sealed tokens left in FTS5 then name no word (see ``sealed_keywords``),
        and :meth:`scrub` empties the WAL's old pages. Its FTS5 postings are left
        in place (listed in ``<table>_dropping`` meanwhile, the delete trigger
        skips them): deleting them cost FTS5 merges that held the lock 30-60 ms;
        :meth:`reclaim_keyword_space` takes their space back."""
        self._conn()
        t, count, step_pause = self.table, 0, WriteSteps()
        with self.store._table_write() as conn:  # first: every process's copy is out of date
            conn.execute(f"DELETE FROM {t}_ns WHERE namespace = ?", (namespace,))
            conn.execute(f"INSERT OR IGNORE INTO {t}_dropping VALUES (?)", (namespace,))
        while True:
            step_pause()
            with self.store._table_write() as conn:
                conn.execute("PRAGMA secure_delete = ON")  # freed pages are zeroed
                last = conn.execute(
                    f"SELECT max(rid) FROM (SELECT rid FROM {t} WHERE namespace = ? "
                    "ORDER BY rid LIMIT ?)", (namespace, step_pause.rows),
                ).fetchone()[0]  # fmt: skip
                if last is None:
                    break
                conn.execute(
                    f"DELETE FROM {t}_vec WHERE namespace = ? AND rid <= ?", (namespace, last)
                )
                count += conn.execute(
                    f"DELETE FROM {t} WHERE namespace = ? AND rid <= ?", (namespace, last)
                ).rowcount
        self._drop_keyed(f"{t}_cache", "identity, text_key", namespace)
        with self.store._table_write() as conn:
            conn.execute("PRAGMA secure_delete = ON")
            conn.execute(f"DELETE FROM {t}_kw WHERE namespace = ?", (namespace,))
            self._secrets.drop(conn, namespace)
            conn.execute(f"DELETE FROM {t}_dropping WHERE namespace = ?", (namespace,))
        if count:
            self.scrub()
        return int(count)

    def reclaim_keyword_space(self) -> None:
        """Rebuild the keyword index from the rows, dropping the sealed postings that
        forgotten namespaces left behind (they match nothing, but take space, about
        80 bytes a message). It holds the write lock while it runs (about 0.5 s per
        100k messages it keeps): run it when the location is quiet, e.g. nightly."""
        t = self.table
        self._conn()
        with self.store._table_write() as conn:
            conn.execute("PRAGMA secure_delete = ON")
            conn.execute(f"INSERT INTO {t}_fts ({t}_fts) VALUES ('rebuild')")
        self.scrub()

    def _drop_keyed(self, table: str, key: str, namespace: str) -> None:
        """Delete a namespace's rows of a WITHOUT ROWID side table, a step at a time."""
        step_pause = WriteSteps()
        while True:
            step_pause()
            with self.store._table_write() as conn:
                conn.execute("PRAGMA secure_delete = ON")
                gone = conn.execute(
                    f"DELETE FROM {table} WHERE namespace = ? AND ({key}) IN "
                    f"(SELECT {key} FROM {table} WHERE namespace = ? LIMIT ?)",
                    (namespace, namespace, step_pause.rows),
                ).rowcount
            if gone < step_pause.rows:
                return

    def scrub(self) -> None:
        """Make deleted rows unrecoverable from the file: their pages were zeroed
        (``secure_delete``), but old copies live in the WAL until a checkpoint."""
        # TRUNCATE empties the WAL (it does nothing while another connection still
        # reads those pages). A PASSIVE checkpoint first copies the pages without
        # holding writers back, so the TRUNCATE, which does, has little left to copy.
        conn = self.store._connection()
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    # -- the in-memory copies of namespaces ---------------------------------

    def _read(self, conn: sqlite3.Connection, namespace: str, after: int) -> tuple[list[int], Any]:
        """(rids, vectors) of ``namespace``'s rows with ``rid > after``, in rid order: one query."""
        np = self._np
        rows = conn.execute(
            f"SELECT rid, vector FROM {self.table}_vec WHERE namespace = ? AND rid > ? "
            "ORDER BY rid",
            (namespace, after),
        ).fetchall()
        blob = b"".join(row[1] for row in rows)
        vectors = np.frombuffer(blob, dtype=np.float32).reshape(len(rows), self.dimension or 1)
        return [row[0] for row in rows], vectors

    def _apply_own(
        self,
        generation: int,
        prior: Mapping[str, int],
        removed: Mapping[str, Sequence[int]],
        written: Sequence[tuple[str, int, bytes]],
    ) -> None:
        """Bring this process's copies up to a write it just committed, without a read.

        Only a copy that reflected the namespace right before the write (the
        generation read inside the write transaction) takes it; any other copy is
        left for the next search to check.
        """
        np = self._np
        appended: dict[str, list[tuple[int, bytes]]] = {}
        for namespace, rid, blob in written:
            appended.setdefault(namespace, []).append((rid, blob))
        for namespace, before in prior.items():
            new = appended.get(namespace, [])
            vectors = np.frombuffer(b"".join(b for _, b in new), dtype=np.float32)
            change = Change(
                generation,
                since=before,
                keys=[rid for rid, _ in new],
                vectors=vectors.reshape(len(new), -1) if new else None,
                removed=removed.get(namespace, ()),
            )
            self.copies.settle(namespace, change)  # no copy at ``before``: nothing to do

    def report_change(
        self, conn: sqlite3.Connection, namespace: str, held: NamespaceMatrix | None
    ) -> Change | None:
        """What changed in ``namespace`` since ``held`` (None: no such namespace).

        One indexed read checks the copy; rows appended since are read alone; a
        removal by another process since reloads the namespace. The change carries
        the generation read *before* its rows, so a write in between only costs a
        re-check later, never a stale answer.
        """
        row = conn.execute(
            f"SELECT changed, removed FROM {self.table}_ns WHERE namespace = ?", (namespace,)
        ).fetchone()
        if row is None:
            return None
        changed, removed = int(row[0]), int(row[1])
        if held is not None and held.version == changed:
            return Change(changed, since=changed)
        if held is not None and held.version >= removed:
            rids, vectors = self._read(conn, namespace, held.last_key(0))
            return Change(changed, since=held.version, keys=rids, vectors=vectors)
        rids, vectors = self._read(conn, namespace, 0)
        return Change(changed, keys=rids, vectors=vectors)

    # -- reads -------------------------------------------------------------

    def rank_namespaces(self, query: Any, top_k: int, keys: list[str] | None) -> list[SearchHit]:
        """Exact search; ``keys=None`` (``search(namespace=None)``) reads every chunk
        (no in-memory copy: meant for maintenance, not per-turn recall)."""
        conn = self._conn()
        found = []
        if keys is None:
            for key in self._all_namespaces(conn):
                found += MatrixView(*self._read(conn, key, 0)).top(query, top_k)
        else:
            for key in keys:
                view = self.current(key, conn)
                found += view.top(query, top_k) if view is not None else []
        return ranked_hits(found, top_k, lambda rids: self._by_rid(conn, rids))

    def rank_spans(self, query: Any, top_k: int, keys: list[str], spans: Spans) -> list[SearchHit]:
        """The rows of the spans from the time index, ranked in this process's copy of
        the namespace (one written after the copy was taken is left to the next search)."""
        conn = self._conn()
        found = []
        for key in keys:
            view = self.current(key, conn)
            if view is not None:
                found += view.among(self._recorded(conn, key, spans), query)
        return ranked_hits(found, top_k, lambda rids: self._by_rid(conn, rids))

    def _recorded(self, conn: sqlite3.Connection, namespace: str, spans: Spans) -> list[int]:
        """The rids of ``namespace`` recorded in ``spans`` (one statement: a range read
        of the time index per span); none when more than :data:`RECORDED_LIMIT` are."""
        one = f"SELECT rid FROM {self.table} WHERE namespace = ? AND {RECORDED} >= ? AND {RECORDED} < ?"
        rids: list[int] = []
        for batch in _batches(spans, _SPANS_PER_STATEMENT):
            sql = " UNION ALL ".join([one] * len(batch)) + " LIMIT ?"
            params = [value for start, end in batch for value in (namespace, start, end)]
            rows = conn.execute(sql, [*params, RECORDED_LIMIT + 1 - len(rids)]).fetchall()
            rids += [row[0] for row in rows]
            if len(rids) > RECORDED_LIMIT:
                return []
        return list(dict.fromkeys(rids))

    def _all_namespaces(self, conn: sqlite3.Connection) -> list[str]:
        return [row[0] for row in conn.execute(f"SELECT namespace FROM {self.table}_ns")]

    def _by_rid(self, conn: sqlite3.Connection, rids: Sequence[int]) -> dict[int, Chunk]:
        out: dict[int, Chunk] = {}
        for batch in _batches(rids):
            marks = ", ".join("?" * len(batch))
            for rid, chunk_id, text, metadata in conn.execute(
                f"SELECT rid, id, text, metadata FROM {self.table} WHERE rid IN ({marks})", batch
            ):
                out[rid] = Chunk(chunk_id, text, None, decode_own_json(metadata))
        return out

    def score_keywords(
        self, terms: list[str], top_k: int, namespace: str
    ) -> list[tuple[str, float]]:
        """FTS5 finds the namespace's documents holding a query term; they are scored
        with the namespace's own statistics (:func:`~fastaiagent.facts.index.keywords.bm25_top`)."""
        t = self.table
        conn = self._conn()
        stats = conn.execute(
            f"SELECT k.docs, k.tokens, s.secret FROM {t}_kw k JOIN {t}_keys s USING (namespace) "
            "WHERE k.namespace = ?", (namespace,),
        ).fetchone()  # fmt: skip
        if not stats or stats[0] <= 0:
            return []
        secret = stats[2]
        nskey, terms = namespace_token(secret), list({seal(secret, term): None for term in terms})
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
        # A sealed token is "k" and a hex digest of one length, one space between tokens:
        # so a term's count in the text is its count among the tokens, read without a split.
        counted = [
            (chunk_id, keywords.count(" ") + 1 if keywords else 0,
             {term: n for term in terms if (n := keywords.count(term))})
            for chunk_id, keywords in self._keyword_candidates(conn, nskey, frequency, budget(top_k))
        ]  # fmt: skip
        return bm25_top(frequency, counted, stats[0], stats[1], top_k)

    def _keyword_candidates(
        self, conn: sqlite3.Connection, nskey: str, frequency: dict[str, int], limit: int
    ) -> list[tuple[str, str]]:
        """``(id, keywords)`` of at most about ``limit`` documents to score: every one
        holding one of the rarest query terms (as many terms as fit in ``limit``
        documents), then the newest holding the others. The rare terms carry BM25's
        weight; FTS5's own ranking of every match (``bm25()``) costs about 4 us a
        document, 10 ms for a common word in a 10k-message namespace."""
        rare, common = by_rarity(frequency, limit)
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

    def read_ids(self, namespace: str) -> set[str]:
        rows = self._conn().execute(
            f"SELECT id FROM {self.table} WHERE namespace = ?", (namespace,)
        )
        return {row[0] for row in rows}

    def read_vector_page(self, namespace: str, after: Any, limit: int) -> tuple[list[Chunk], Any]:
        """Keyset pages by ``rid`` (the namespace's index order)."""
        t = self.table
        rows = self._conn().execute(
            f"SELECT c.rid, c.id, c.text, c.metadata, v.vector FROM {t} c "
            f"JOIN {t}_vec v ON v.namespace = c.namespace AND v.rid = c.rid "
            "WHERE c.namespace = ? AND c.rid > ? ORDER BY c.rid LIMIT ?",
            (namespace, after or 0, limit),
        ).fetchall()
        chunks = [Chunk(i, text, bytes_vector(vec), decode_own_json(meta)) for _, i, text, meta, vec in rows]
        return chunks, (rows[-1][0] if len(rows) == limit else None)

    def read_newest(self, namespace: str, limit: int, offset: int) -> list[Chunk]:
        """Backwards along the time index (a number sorts below any text in SQLite, so
        ``< ''`` is a range of the numeric times), then the chunks without one."""
        t, conn, timed = self.table, self._conn(), f"{RECORDED} < ''"
        rows = conn.execute(
            f"SELECT id, text, metadata FROM {t} WHERE namespace = ? AND {timed} "
            f"ORDER BY {RECORDED} DESC, rid DESC LIMIT ? OFFSET ?",
            (namespace, limit, offset),
        ).fetchall()
        if len(rows) < limit:
            (before,) = conn.execute(
                f"SELECT count(*) FROM {t} WHERE namespace = ? AND {timed}", (namespace,)
            ).fetchone()
            rows += conn.execute(
                f"SELECT id, text, metadata FROM {t} WHERE namespace = ? AND NOT "
                f"coalesce({timed}, 0) ORDER BY rid LIMIT ? OFFSET ?",
                (namespace, limit - len(rows), max(0, offset - before)),
            ).fetchall()
        return [Chunk(chunk_id, text, None, decode_own_json(meta)) for chunk_id, text, meta in rows]

    def read_namespace_counts(self) -> list[tuple[str, int]]:
        """From the per-namespace keyword statistics, kept by triggers with every row."""
        query = f"SELECT namespace, docs FROM {self.table}_kw WHERE docs > 0"
        return [(name, int(docs)) for name, docs in self._conn().execute(query)]

    def read_namespace_names(self) -> list[str]:
        query = f"SELECT namespace FROM {self.table}_kw WHERE docs > 0"
        return [row[0] for row in self._conn().execute(query)]

    def read_chunks(self, ids: list[str]) -> dict[str, Chunk]:
        found: dict[str, Chunk] = {}
        conn = self._conn()
        for batch in _batches(ids):
            marks = ", ".join("?" * len(batch))
            for chunk_id, text, metadata in conn.execute(
                f"SELECT id, text, metadata FROM {self.table} WHERE id IN ({marks})", batch
            ):
                found[chunk_id] = Chunk(chunk_id, text, None, decode_own_json(metadata))
        return found

    def read_namespaces(self, keys: list[str] | None) -> list[Chunk]:
        """Oldest first."""
        where, params = (
            ("", ())
            if keys is None
            else (f"WHERE namespace IN ({', '.join('?' * len(keys))})", tuple(keys))
        )
        rows = self._conn().execute(
            f"SELECT id, text, metadata FROM {self.table} {where} ORDER BY rid", params
        )
        return [Chunk(chunk_id, text, None, decode_own_json(meta)) for chunk_id, text, meta in rows]

    def holds(self, namespace: str) -> bool:
        """One row of the namespace index, not a count of every one."""
        query = f"SELECT 1 FROM {self.table} WHERE namespace = ? LIMIT 1"
        return self._conn().execute(query, (namespace,)).fetchone() is not None

    def count_rows(self, namespace: str | None) -> int:
        t = self.table
        if namespace is None:
            row = self._conn().execute(f"SELECT COUNT(*) FROM {t}").fetchone()
        else:
            row = (
                self._conn()
                .execute(f"SELECT COUNT(*) FROM {t} WHERE namespace = ?", (namespace,))
                .fetchone()
            )
        return int(row[0])

    # -- the embedding cache -------------------------------------------------

    def read_cache(self, identity: str, namespace: str, keys: list[str]) -> list[tuple[str, bytes]]:
        conn = self._conn()
        found: list[tuple[str, bytes]] = []
        for batch in _batches(keys):
            marks = ", ".join("?" * len(batch))
            found += conn.execute(
                f"SELECT text_key, vector FROM {self.table}_cache WHERE namespace = ? "
                f"AND identity = ? AND text_key IN ({marks})",
                (namespace, identity, *batch),
            ).fetchall()
        return found

    def delete_cache(self, namespace: str, keys: list[str]) -> None:
        self._conn()
        with self.store._table_write() as conn:
            conn.execute("PRAGMA secure_delete = ON")  # freed pages are zeroed
            for batch in _batches(keys):
                conn.execute(
                    f"DELETE FROM {self.table}_cache WHERE namespace = ? "
                    f"AND text_key IN ({', '.join('?' * len(batch))})",
                    (namespace, *batch),
                )

    def write_cache(self, identity: str, namespace: str, blobs: Mapping[str, bytes]) -> None:
        self._conn()
        with self.store._table_write() as conn:
            conn.executemany(
                f"INSERT OR REPLACE INTO {self.table}_cache (namespace, identity, text_key, "
                "vector) VALUES (?, ?, ?, ?)",
                [(namespace, identity, key, blob) for key, blob in blobs.items()],
            )


__all__ = ["DEFAULT_TABLE", "SQLiteVectorIndex"]
