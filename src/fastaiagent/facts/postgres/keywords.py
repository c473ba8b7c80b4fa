"""The keyword side of the Postgres vector index: postings in a tsvector, BM25 per namespace.

Each row of ``<t>_vectors`` carries a ``tsvector`` of its keyword tokens (the
stop-word-free, stemmed tokens of :func:`~fastaiagent.kb.bm25.tokenize`) plus one
lexeme naming its namespace, and ``ntokens``, its token count. A trigger keeps
each namespace's document count and token total in ``<t>_vector_ns``. A search
lets the GIN index pick candidates of the namespace (``ts_rank`` order), then
scores them with BM25 on the namespace's own statistics
(:mod:`fastaiagent.facts.index.keywords`), as the SQLite and in-process indexes
do: one user's ranking never depends on what other users said.
"""

from __future__ import annotations

import hashlib
from typing import Any

from fastaiagent.facts.index.keywords import bm25_top, grouped
from fastaiagent.kb.bm25 import tokenize

CANDIDATES = 200  # GIN matches rescored with the namespace's statistics

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
    "UPDATE {n} SET docs = s.docs, tokens = s.tokens FROM (SELECT namespace, count(*) AS docs, "
    "sum(ntokens) AS tokens FROM {v} GROUP BY namespace) s WHERE {n}.namespace = s.namespace",
)

# Step 4: rows holding Chinese, Japanese or Korean text get their tokens again, as
# character pairs (the tokenizer took such a run for one word before): a query in
# those scripts then finds rows written before. Rows of other scripts are unchanged.
CJK_ROWS = (
    "SELECT id, namespace, text, metadata FROM {v} WHERE text ~ %(cjk)s "
    "OR metadata->>'context' ~ %(cjk)s"
)
RETOKENIZE = "UPDATE {v} SET tsv = to_tsvector('simple', %s), ntokens = %s WHERE id = %s"
CJK_PATTERN = "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"


def retokenize_cjk(conn: Any, rows_query: Any, update: Any) -> None:
    """Schema step 4 (see :data:`CJK_ROWS`), in the step's transaction."""
    from fastaiagent.facts.vectors import keyword_text
    from fastaiagent.kb.protocols import Chunk

    found = conn.execute(rows_query, {"cjk": CJK_PATTERN}).fetchall()
    params = [
        (*postings(keyword_text(Chunk(i, text, None, dict(meta))), namespace), i)
        for i, namespace, text, meta in found
    ]
    if params:
        with conn.cursor() as cursor:
            cursor.executemany(update, params)


QUERIES = {
    # One round trip: the namespace's statistics and, per query term, how many of
    # its rows hold it (the GIN index intersects the namespace's lexeme with the
    # term's); then the candidates, each with its length and the counts of the
    # query terms it holds. No candidate, no row.
    "keyword": "WITH s AS (SELECT n.docs, n.tokens, ARRAY(SELECT (SELECT count(*) FROM {v} "
    "WHERE tsv @@ to_tsquery('simple', %(nskey)s || ' & ' || quote_literal(t.term))) "
    "FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS t(term, i) ORDER BY t.i) AS df "
    "FROM {n} n WHERE n.namespace = %(ns)s AND n.docs > 0), "
    "c AS (SELECT id, ntokens, tsv FROM {v} WHERE namespace = %(ns)s "
    "AND tsv @@ to_tsquery('simple', %(match)s) "
    "ORDER BY ts_rank(tsv, to_tsquery('simple', %(any)s)) DESC, id LIMIT %(limit)s) "
    "SELECT s.docs, s.tokens, s.df, c.id, c.ntokens, u.lexeme, "
    "coalesce(array_length(u.positions, 1), 1) FROM s CROSS JOIN c "
    "LEFT JOIN LATERAL unnest(c.tsv) u ON u.lexeme = ANY(%(terms)s::text[])",
}


def nskey(namespace: str) -> str:
    """The namespace as one lexeme of the row's tsvector (a hex digest: one word)."""
    return "n" + hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:32]


def postings(text: str, namespace: str) -> tuple[str, int]:
    """What the row's tsvector is made of (the text's keyword tokens, then the
    namespace's lexeme) and the number of keyword tokens."""
    tokens = tokenize(text)
    return " ".join([*tokens, nskey(namespace)]), len(tokens)


def search(conn: Any, queries: dict[str, Any], terms: list[str], top_k: int, namespace: str) -> list[tuple[str, float]]:
    """``(chunk id, BM25 score)`` of the ``top_k`` best matches of the (sorted,
    distinct, not empty) query ``terms`` in ``namespace``: one round trip."""
    any_term = " | ".join(f"'{term}'" for term in terms)  # tokens are word characters only
    key = nskey(namespace)
    params = {
        "ns": namespace,
        "nskey": f"'{key}'",
        "terms": terms,
        "any": any_term,
        "match": f"'{key}' & ({any_term})",
        "limit": max(CANDIDATES, 4 * top_k),
    }
    rows = conn.execute(queries["keyword"], params).fetchall()
    if not rows:
        return []
    docs, tokens, df = rows[0][:3]
    frequency = dict(zip(terms, (int(n) for n in df), strict=True))
    found = grouped((row[3], int(row[4]), row[5], int(row[6])) for row in rows)
    return bm25_top(frequency, found, int(docs), int(tokens), top_k)


__all__ = [
    "CANDIDATES", "CJK_ROWS", "QUERIES", "RETOKENIZE", "STEP2", "nskey", "postings",
    "retokenize_cjk", "search",
]  # fmt: skip
