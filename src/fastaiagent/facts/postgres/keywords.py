"""The keyword side of the Postgres vector index: postings in a tsvector, BM25 per namespace.

Each row of ``<t>_vectors`` carries a ``tsvector`` of its keyword tokens (the
stop-word-free, stemmed tokens of :func:`~fastaiagent.kb.bm25.tokenize`) plus one
lexeme naming its namespace, and ``ntokens``, its token count. Triggers keep
each namespace's document count and token total in ``<t>_vector_ns`` and, per
term, how many of its documents hold it in ``<t>_vector_terms`` (version 5:
counting a common word's matches through the GIN index read every matching row,
60-90 ms for a word in 12k of a user's 100k messages). A search reads those
counts, takes every document holding the rarest query terms (as many terms as
fit in the candidate budget), then the newest holding the others, as the
SQLite index does, and scores them with BM25 on the namespace's own statistics
(:mod:`fastaiagent.facts.index.keywords`): one user's ranking never depends on
what other users said.
"""

from __future__ import annotations

import hashlib
from typing import Any

from fastaiagent.facts.index.keywords import bm25_top, budget, by_rarity, grouped, newest_window

# Each namespace's document count and token total, and per term its document count,
# counted again from the rows (steps 2, 5 and 6).
RECOUNT_STATS = (
    "UPDATE {n} SET docs = s.docs, tokens = s.tokens FROM (SELECT namespace, count(*) AS docs, "
    "sum(ntokens) AS tokens FROM {v} GROUP BY namespace) s WHERE {n}.namespace = s.namespace"
)
RECOUNT_TERMS = (
    "DELETE FROM {terms}",
    "INSERT INTO {terms} (namespace, term, df) SELECT namespace, u.lexeme, count(*) "
    "FROM {v}, unnest(tsv) u GROUP BY namespace, u.lexeme",
)

# Schema step 2 of the vectors component: the token counts and the statistics.
STEP2 = (
    "ALTER TABLE {v} ADD COLUMN IF NOT EXISTS ntokens INTEGER NOT NULL DEFAULT 0",
    "UPDATE {v} SET ntokens = (SELECT coalesce(sum(coalesce(array_length(positions, 1), 1)), 1) - 1 "
    "FROM unnest(tsv))",
    "ALTER TABLE {n} ADD COLUMN IF NOT EXISTS docs BIGINT NOT NULL DEFAULT 0, "
    "ADD COLUMN IF NOT EXISTS tokens BIGINT NOT NULL DEFAULT 0",
    "CREATE OR REPLACE FUNCTION {stats_fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF TG_OP <> 'INSERT' THEN UPDATE {n} SET docs = docs - 1, tokens = tokens - OLD.ntokens "
    "WHERE namespace = OLD.namespace; END IF; "
    "IF TG_OP <> 'DELETE' THEN UPDATE {n} SET docs = docs + 1, tokens = tokens + NEW.ntokens "
    "WHERE namespace = NEW.namespace; END IF; RETURN NULL; END $$",
    "DROP TRIGGER IF EXISTS {stats_trigger} ON {v}",
    "CREATE TRIGGER {stats_trigger} AFTER INSERT OR DELETE OR UPDATE OF namespace, ntokens "
    "ON {v} FOR EACH ROW EXECUTE FUNCTION {stats_fn}()",
    RECOUNT_STATS,
)

# Step 4: rows holding Chinese, Japanese or Korean text get their tokens again, as
# character pairs (the tokenizer took such a run for one word before): a query in
# those scripts then finds rows written before. Rows of other scripts are unchanged.
CJK_ROWS = (
    "SELECT id, namespace, text, metadata FROM {v} WHERE text ~ %(cjk)s "
    "OR metadata->>'context' ~ %(cjk)s"
)
CJK_PATTERN = "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
RETOKENIZE = (
    "UPDATE {v} SET tsv = to_tsvector('simple', %(tsv)s), ntokens = %(n)s "
    "WHERE id = %(id)s AND tsv IS DISTINCT FROM to_tsvector('simple', %(tsv)s)"
)
# Step 6: every row gets its tokens again, stemmed as the tokenizer now stems ("move"
# and "moving" map together). Set-based: the new tokens are copied into a temporary
# table and applied by one UPDATE with the count triggers off (row by row, their
# work made it ~5 ms a row), then the counts are made again from the rows.
ALL_ROWS = "SELECT id, namespace, text, metadata FROM {v}"
RESTEM_STAGE = (
    "CREATE TEMP TABLE fastaiagent_restem (id TEXT PRIMARY KEY, tsv TEXT NOT NULL, "
    "ntokens INTEGER NOT NULL) ON COMMIT DROP"
)
RESTEM_COPY = "COPY fastaiagent_restem (id, tsv, ntokens) FROM STDIN"
RESTEM_APPLY = (
    "ALTER TABLE {v} DISABLE TRIGGER {terms_trigger}",
    "ALTER TABLE {v} DISABLE TRIGGER {stats_trigger}",
    "UPDATE {v} v SET tsv = to_tsvector('simple', r.tsv), ntokens = r.ntokens "
    "FROM fastaiagent_restem r WHERE v.id = r.id "
    "AND (v.ntokens <> r.ntokens OR v.tsv IS DISTINCT FROM to_tsvector('simple', r.tsv))",
    "ALTER TABLE {v} ENABLE TRIGGER {terms_trigger}",
    "ALTER TABLE {v} ENABLE TRIGGER {stats_trigger}",
    RECOUNT_STATS,
    *RECOUNT_TERMS,
)


def retokenize_cjk(conn: Any, rows_query: Any, update: Any) -> None:
    """Schema step 4 (see :data:`CJK_ROWS`), in the step's transaction (the triggers
    keep the statistics and term counts in step: the rows are few)."""
    params = [
        {"tsv": tsv, "n": count, "id": i}
        for i, tsv, count in _postings_of(conn.execute(rows_query, {"cjk": CJK_PATTERN}))
    ]
    if params:
        with conn.cursor() as cursor:
            cursor.executemany(update, params)


def restem(conn: Any, rows_query: Any, apply: list[Any]) -> None:
    """Schema step 6 (see :data:`RESTEM_APPLY`), in one transaction."""
    with conn.transaction():
        found = _postings_of(conn.execute(rows_query))
        conn.execute(RESTEM_STAGE)
        with conn.cursor().copy(RESTEM_COPY) as copy:
            for row in found:
                copy.write_row(row)
        for statement in apply:
            conn.execute(statement)


def _postings_of(rows: Any) -> list[tuple[str, str, int]]:
    """``(id, tsvector text, token count)`` of rows ``(id, namespace, text, metadata)``."""
    from fastaiagent.kb.protocols import Chunk

    return [
        (i, *postings(Chunk(i, text, None, dict(meta)), namespace))
        for i, namespace, text, meta in rows
    ]


# Step 5: per namespace and term, the documents holding it. A namespace being
# deleted (its <t>_vector_ns row gone first) is not counted down row by row: its
# counts go with it at the end. A count that reaches 0 is deleted (no word of a
# forgotten message stays).
STEP5 = (
    "CREATE TABLE IF NOT EXISTS {terms} (namespace TEXT NOT NULL, term TEXT NOT NULL, "
    "df INTEGER NOT NULL, PRIMARY KEY (namespace, term))",
    "CREATE OR REPLACE FUNCTION {terms_fn}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF TG_OP <> 'INSERT' AND EXISTS (SELECT 1 FROM {n} WHERE namespace = OLD.namespace) THEN "
    "UPDATE {terms} t SET df = t.df - 1 FROM unnest(OLD.tsv) u "
    "WHERE t.namespace = OLD.namespace AND t.term = u.lexeme; "
    "DELETE FROM {terms} t USING unnest(OLD.tsv) u "
    "WHERE t.namespace = OLD.namespace AND t.term = u.lexeme AND t.df <= 0; END IF; "
    "IF TG_OP <> 'DELETE' THEN INSERT INTO {terms} (namespace, term, df) "
    "SELECT NEW.namespace, u.lexeme, 1 FROM unnest(NEW.tsv) u "
    "ON CONFLICT (namespace, term) DO UPDATE SET df = {terms}.df + 1; END IF; "
    "RETURN NULL; END $$",
    "DROP TRIGGER IF EXISTS {terms_trigger} ON {v}",
    "CREATE TRIGGER {terms_trigger} AFTER INSERT OR DELETE OR UPDATE OF namespace, tsv "
    "ON {v} FOR EACH ROW EXECUTE FUNCTION {terms_fn}()",
    # A namespace's newest rows along its (namespace, gen) index whatever the table's
    # statistics say (before the first ANALYZE of a bulk-loaded table the planner
    # read all 100k rows through a bitmap and sorted them: 300 ms instead of 2).
    "CREATE OR REPLACE FUNCTION {newest_fn}(ns TEXT, n BIGINT) "
    "RETURNS TABLE (id TEXT, ntokens INTEGER, tsv TSVECTOR, gen BIGINT) LANGUAGE sql STABLE "
    "SET enable_bitmapscan = off SET enable_seqscan = off AS $$ "
    "SELECT v.id, v.ntokens, v.tsv, v.gen FROM {v} v WHERE v.namespace = ns ORDER BY v.gen DESC, v.id DESC "
    "LIMIT n $$",
    *RECOUNT_TERMS,  # a repeated step starts afresh
)
DROP_TERMS = "DELETE FROM {terms} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {terms} WHERE namespace = %s LIMIT %s))"

# A common term's newest documents: through the GIN index and a sort (reads every
# match: cost ~ df), or the namespace's newest ``window`` rows along its
# (namespace, gen) index, each tested (cost ~ window ~ budget * docs / df; the
# window grows when it held too few). The search takes the cheaper.
_ROW_TERMS = (
    "SELECT c.id, c.ntokens, u.lexeme, coalesce(array_length(u.positions, 1), 1) FROM ({rows}) c "
    "LEFT JOIN LATERAL unnest(c.tsv) u ON u.lexeme = ANY(%(terms)s::text[])"
)
_MATCHING = "SELECT id, ntokens, tsv FROM {v} WHERE namespace = %(ns)s AND tsv @@ to_tsquery('simple', %(match)s)"
_NEWEST_WINDOW = (
    "SELECT id, ntokens, tsv FROM {newest_fn}(%(ns)s, %(window)s) "
    "WHERE tsv @@ to_tsquery('simple', %(match)s) ORDER BY gen DESC, id DESC LIMIT %(limit)s"
)


QUERIES = {
    # The namespace's statistics and each query term's document count, by key.
    "keyword_stats": "SELECT n.docs, n.tokens, ARRAY(SELECT coalesce((SELECT df FROM {terms} "
    "WHERE namespace = %(ns)s AND term = t.term), 0) FROM unnest(%(terms)s::text[]) "
    "WITH ORDINALITY AS t(term, i) ORDER BY t.i) FROM {n} n WHERE n.namespace = %(ns)s AND n.docs > 0",
    "keyword_rare": _ROW_TERMS.format(rows=_MATCHING),
    "keyword_newest_window": _ROW_TERMS.format(rows=_NEWEST_WINDOW),
    "keyword_newest_by_match": _ROW_TERMS.format(rows=_MATCHING + " ORDER BY gen DESC, id DESC LIMIT %(limit)s"),
    "drop_terms": DROP_TERMS,
}


def nskey(namespace: str) -> str:
    """The namespace as one lexeme of the row's tsvector (a hex digest: one word)."""
    return "n" + hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:32]


def postings(chunk: Any, namespace: str) -> tuple[str, int]:
    """What the row's tsvector is made of (the chunk's keyword tokens,
    :func:`~fastaiagent.facts.vectors.keyword_tokens`, then the namespace's
    lexeme) and the number of keyword tokens."""
    from fastaiagent.facts.vectors import keyword_tokens  # facts.vectors reads the stores' modules

    tokens = keyword_tokens(chunk)
    return " ".join([*tokens, nskey(namespace)]), len(tokens)


def search(conn: Any, queries: dict[str, Any], terms: list[str], top_k: int, namespace: str) -> list[tuple[str, float]]:
    """``(chunk id, BM25 score)`` of the ``top_k`` best matches of the (sorted,
    distinct, not empty) query ``terms`` in ``namespace``: two or three round trips."""
    params: dict[str, Any] = {"ns": namespace, "terms": terms}
    stats = conn.execute(queries["keyword_stats"], params).fetchone()
    if stats is None:
        return []
    docs, tokens = int(stats[0]), int(stats[1])
    frequency = dict(zip(terms, (int(n) for n in stats[2]), strict=True))
    limit = budget(top_k)
    rare, common = by_rarity(frequency, limit)
    key = nskey(namespace)
    rows: list[tuple[Any, ...]] = []
    if rare:
        rows = conn.execute(queries["keyword_rare"], {**params, "match": _match(key, rare)}).fetchall()
    found = grouped((r[0], int(r[1]), r[2], int(r[3])) for r in rows)
    if common and len(found) < limit:
        seen = {row[0] for row in found}
        newer = _newest(conn, queries, {**params, "match": _match(key, common), "limit": limit},
                        docs, sum(frequency[t] for t in common))  # fmt: skip
        found += [row for row in newer if row[0] not in seen][: limit - len(found)]
    return bm25_top(frequency, found, docs, tokens, top_k)


def _newest(conn: Any, queries: dict[str, Any], params: dict[str, Any], docs: int, held: int) -> list[Any]:
    """The newest ``params["limit"]`` documents holding a common term (``held``: the
    sum of their document counts), by the cheaper way (see ``_NEWEST_WINDOW``)."""
    limit = params["limit"]
    if limit * docs >= held * held:  # rare enough: read every match
        rows = conn.execute(queries["keyword_newest_by_match"], params).fetchall()
        return grouped((r[0], int(r[1]), r[2], int(r[3])) for r in rows)
    window = newest_window(limit, docs, held)
    while True:
        rows = conn.execute(queries["keyword_newest_window"], {**params, "window": window}).fetchall()
        found = grouped((r[0], int(r[1]), r[2], int(r[3])) for r in rows)
        if len(found) >= limit or window >= docs:
            return found
        window = min(docs, window * 4)


def _match(key: str, terms: list[str]) -> str:
    """``'<namespace lexeme>' & ('a' | 'b')`` (tokens are word characters only)."""
    return f"'{key}' & (" + " | ".join(f"'{term}'" for term in terms) + ")"


__all__ = [
    "ALL_ROWS", "CJK_ROWS", "DROP_TERMS", "QUERIES", "RECOUNT_STATS", "RECOUNT_TERMS", "RESTEM_APPLY",
    "RETOKENIZE", "STEP2", "STEP5", "nskey", "postings", "restem", "retokenize_cjk", "search",
]  # fmt: skip
