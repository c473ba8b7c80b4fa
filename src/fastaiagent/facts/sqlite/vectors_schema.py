"""The SQLite tables of the durable vector index, and how a namespace reads in them.

Tables (component ``vectors:<table>``, same file and connections as the facts):

- ``<table>``: one row per chunk (id, namespace, text, metadata JSON, the
  vector's dimension), indexed on namespace;
- ``<table>_vec``: the L2-normalised vectors as float32 bytes, clustered by
  (namespace, rid) so a namespace loads as one contiguous range;
- ``<table>_fts``: an FTS5 index over the chunk's keyword tokens (the same
  stop-word-free, stemmed tokens as the in-process BM25 index, sealed with the
  namespace's secret: see ``sealed_keywords``), external content kept in step
  by triggers, so a chunk and its postings change in one transaction. A
  namespace is one extra token in the row, so a keyword query reads only that
  namespace's postings;
- ``<table>_keys``: per namespace, the secret its tokens are sealed with;
- ``<table>_kw``: per namespace, its documents and tokens (BM25 statistics);
- ``<table>_cache``: embeddings by (namespace, embedder identity, text key);
- ``<table>_ns``: per namespace, the generation of its last change and of its
  last removal, so a process can keep a namespace's matrix in memory and
  check it with one indexed read per search (appends are read incrementally);
- ``<table>_meta``: the index's dimension (fixed by the first add), the
  write generation counter and the text analyzer's version the postings were
  built with (``analyzer``: :mod:`fastaiagent.facts.index.reindex`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from fastaiagent._schema import Schema
from fastaiagent.facts.sqlite.sealed_keywords import seal_existing_rows

# Trigger bodies hold ';', so the step runs statement by statement (not split on ';').
_V1 = (
    """CREATE TABLE IF NOT EXISTS {t} (
        rid INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        namespace TEXT NOT NULL,
        nskey TEXT NOT NULL,
        text TEXT NOT NULL,
        keywords TEXT NOT NULL,
        metadata TEXT NOT NULL,
        dimension INTEGER NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS idx_{t}_namespace ON {t} (namespace, rid)",
    # The vectors of a namespace stored together, in rid order: loading one reads a
    # contiguous range (30% faster than through the index, more when users interleave).
    """CREATE TABLE IF NOT EXISTS {t}_vec (
        namespace TEXT NOT NULL,
        rid INTEGER NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (namespace, rid)) WITHOUT ROWID""",
    """CREATE VIRTUAL TABLE IF NOT EXISTS {t}_fts USING fts5(
        nskey, keywords, content='{t}', content_rowid='rid')""",
    """CREATE TRIGGER IF NOT EXISTS {t}_ai AFTER INSERT ON {t} BEGIN
        INSERT INTO {t}_fts (rowid, nskey, keywords) VALUES (new.rid, new.nskey, new.keywords);
    END""",
    """CREATE TRIGGER IF NOT EXISTS {t}_ad AFTER DELETE ON {t} BEGIN
        INSERT INTO {t}_fts ({t}_fts, rowid, nskey, keywords)
        VALUES ('delete', old.rid, old.nskey, old.keywords);
        DELETE FROM {t}_vec WHERE namespace = old.namespace AND rid = old.rid;
    END""",
    """CREATE TRIGGER IF NOT EXISTS {t}_au AFTER UPDATE ON {t} BEGIN
        INSERT INTO {t}_fts ({t}_fts, rowid, nskey, keywords)
        VALUES ('delete', old.rid, old.nskey, old.keywords);
        INSERT INTO {t}_fts (rowid, nskey, keywords) VALUES (new.rid, new.nskey, new.keywords);
    END""",
    """CREATE TABLE IF NOT EXISTS {t}_cache (
        namespace TEXT NOT NULL,
        identity TEXT NOT NULL,
        text_key TEXT NOT NULL,
        vector BLOB NOT NULL,
        PRIMARY KEY (namespace, identity, text_key)) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS {t}_ns (
        namespace TEXT PRIMARY KEY,
        changed INTEGER NOT NULL,
        removed INTEGER NOT NULL) WITHOUT ROWID""",
    "CREATE TABLE IF NOT EXISTS {t}_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
)


# Version 2: per-namespace keyword statistics (documents, tokens), kept by triggers in
# the write's transaction, so keyword scores use the user's own BM25 statistics (as
# the in-process index does) instead of FTS5's table-wide ones.
# A row's token count is (length(k) - length(replace(k, ' ', '')) + (k != '')) of its
# space-joined keywords k.
_V2 = (
    """CREATE TABLE IF NOT EXISTS {t}_kw (
        namespace TEXT PRIMARY KEY,
        docs INTEGER NOT NULL,
        tokens INTEGER NOT NULL) WITHOUT ROWID""",
    """INSERT OR REPLACE INTO {t}_kw (namespace, docs, tokens)
        SELECT namespace, count(*), sum((length(keywords) - length(replace(keywords, ' ', '')) + (keywords != ''))) FROM {t} GROUP BY namespace""",
    """CREATE TRIGGER IF NOT EXISTS {t}_kw_ai AFTER INSERT ON {t} BEGIN
        INSERT INTO {t}_kw (namespace, docs, tokens) VALUES (new.namespace, 1, (length(new.keywords) - length(replace(new.keywords, ' ', '')) + (new.keywords != '')))
        ON CONFLICT (namespace) DO UPDATE SET docs = docs + 1, tokens = tokens + excluded.tokens;
    END""",
    """CREATE TRIGGER IF NOT EXISTS {t}_kw_ad AFTER DELETE ON {t} BEGIN
        UPDATE {t}_kw SET docs = docs - 1, tokens = tokens - (length(old.keywords) - length(replace(old.keywords, ' ', '')) + (old.keywords != ''))
        WHERE namespace = old.namespace;
    END""",
    """CREATE TRIGGER IF NOT EXISTS {t}_kw_au AFTER UPDATE ON {t} BEGIN
        UPDATE {t}_kw SET docs = docs - 1, tokens = tokens - (length(old.keywords) - length(replace(old.keywords, ' ', '')) + (old.keywords != ''))
        WHERE namespace = old.namespace;
        INSERT INTO {t}_kw (namespace, docs, tokens) VALUES (new.namespace, 1, (length(new.keywords) - length(replace(new.keywords, ' ', '')) + (new.keywords != '')))
        ON CONFLICT (namespace) DO UPDATE SET docs = docs + 1, tokens = tokens + excluded.tokens;
    END""",
)


# Version 3: chunks by the time they were recorded (``metadata.created_at``, epoch
# seconds), so recall can list a namespace's messages of a span of time ("last May")
# with one index range read, not a scan of every row's JSON.
RECORDED = "json_extract(metadata, '$.created_at')"
_V3 = (f"CREATE INDEX IF NOT EXISTS idx_{{t}}_recorded ON {{t}} (namespace, {RECORDED})",)


# Version 5: a namespace being forgotten is listed in ``<table>_dropping`` while its
# rows go, and the delete trigger leaves its FTS5 postings alone: they are sealed
# with the namespace's secret, which goes last, so nothing can match them again,
# and writing FTS5 delete markers made its automerges hold the write lock for
# 30-60 ms mid-forget. The postings' space comes back with ``reclaim_keyword_space``.
_V5 = (
    "CREATE TABLE IF NOT EXISTS {t}_dropping (namespace TEXT PRIMARY KEY) WITHOUT ROWID",
    "DROP TRIGGER IF EXISTS {t}_ad",
    """CREATE TRIGGER {t}_ad AFTER DELETE ON {t} BEGIN
        INSERT INTO {t}_fts ({t}_fts, rowid, nskey, keywords)
        SELECT 'delete', old.rid, old.nskey, old.keywords
        WHERE NOT EXISTS (SELECT 1 FROM {t}_dropping WHERE namespace = old.namespace);
        DELETE FROM {t}_vec WHERE namespace = old.namespace AND rid = old.rid;
    END""",
)


VECTOR_COMPANIONS = ("vec", "fts", "keys", "kw", "cache", "ns", "meta", "dropping")
"""The tables made beside a vector table ``<table>``, ``<table>_<name>`` (FTS5's own
shadow tables go with ``<table>_fts``)."""


def vectors_schema(table: str) -> Schema:
    """The migrations of a vector table set (component ``vectors:<table>``)."""

    def step(statements: Sequence[str]) -> Any:
        def run(conn: sqlite3.Connection) -> None:
            for statement in statements:
                conn.execute(statement.format(t=table))

        return run

    def seal(conn: sqlite3.Connection) -> None:  # version 4: sealed keyword tokens
        seal_existing_rows(conn, table)

    # Version 6: the stemmer maps a word's forms together ("move" and "moving"):
    # every row's tokens are made again from its text (the same step as version 4).
    return Schema(f"vectors:{table}", [step(_V1), step(_V2), step(_V3), seal, step(_V5), seal])


def fts_match(nskey: str, terms: Sequence[str]) -> str:
    """``nskey : "<token>" AND keywords : ("a" OR "b")``: a namespace's documents
    holding any of ``terms``."""
    words = " OR ".join(f'"{term}"' for term in terms)  # tokens hold no '"' (word chars only)
    return f'nskey : "{nskey}" AND keywords : ({words})'


__all__ = ["RECORDED", "VECTOR_COMPANIONS", "fts_match", "vectors_schema"]
