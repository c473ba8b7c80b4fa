"""pgvector for the Postgres vector index: a ``vector`` column and search in the server.

When the ``vector`` extension is installed in the database (or available and
this role may create it), :class:`~fastaiagent.facts.postgres.vectors.PostgresVectorIndex`
also writes every chunk's normalised vector to an ``embedding vector`` column.
What that buys:

- a worker's first search of a namespace runs in the server (``ORDER BY
  embedding <=> query``), instead of reading the whole namespace into memory
  first; the in-memory copy is then loaded in the background for later searches;
- the vectors are queryable with SQL and pgvector's operators by other tools.

The float32 bytes column stays the source of the in-memory copies, so an index
without the extension works exactly as before. Opening a table written before
the column existed adds it and fills it in bounded batches, once, under the
table's advisory lock.
"""

from __future__ import annotations

import logging
from typing import Any

from fastaiagent.errors import MissingExtraError
from fastaiagent.facts.postgres.store import sql
from fastaiagent.facts.schema import advisory_lock

logger = logging.getLogger("fastaiagent.facts.postgres.pgvector")

BACKFILL_BATCH = 1000  # rows converted per statement when an older table gains the column

_INSTALLED = "SELECT 1 FROM pg_extension WHERE extname = 'vector'"
_AVAILABLE = "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
_HAS_COLUMN = (
    "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%s) "
    "AND attname = 'embedding' AND NOT attisdropped"
)


def literal(row: Any) -> str:
    """A float32 row as pgvector's text input (``[x,y,...]``)."""
    return "[" + ",".join(map(repr, row.tolist())) + "]"


def _extension_ready(conn: Any, asked: bool | None, where: str) -> bool:
    """True when the extension is installed (created here if available and allowed)."""
    if conn.execute(_INSTALLED).fetchone():
        return True
    if asked is False:
        return False
    if not conn.execute(_AVAILABLE).fetchone():
        if asked:
            raise MissingExtraError(
                f"pgvector=True, but the Postgres server at {where} has no 'vector' extension; "
                "install pgvector on the server, or leave pgvector unset to search without it"
            )
        return False
    try:
        with conn.transaction():
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except Exception as exc:  # e.g. not allowed for this role: search without it
        if asked:
            raise MissingExtraError(
                f"pgvector=True, but CREATE EXTENSION vector failed at {where}: {exc}"
            ) from exc
        logger.info("pgvector is available at %s but could not be created: %s", where, exc)
        return False
    return True


def enable(conn: Any, table: str, asked: bool | None, where: str) -> bool:
    """Whether ``table`` (a vectors table) uses pgvector; adds and fills its
    ``embedding`` column on first use. ``asked``: None = when available,
    True = required (else :class:`~fastaiagent.errors.MissingExtraError`), False = never."""
    if asked is False or not _extension_ready(conn, asked, where):
        return False
    regclass = '"' + table.replace('"', '""') + '"'
    if conn.execute(_HAS_COLUMN, (regclass,)).fetchone():
        return True
    with advisory_lock(conn, table):
        name = sql.Identifier(table)
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS embedding vector").format(name))
        # A row holds both copies of its vector (~3 KB at 384 dimensions): keep rows
        # under a page whole, so a search reads no TOAST chunks per row; MAIN still
        # lets a very large vector go out of line rather than fail the insert.
        conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN embedding SET STORAGE MAIN").format(name))
        conn.execute(sql.SQL("ALTER TABLE {} SET (toast_tuple_target = 8160)").format(name))
        _backfill(conn, table)
    return True


def _backfill(conn: Any, table: str) -> None:
    """Fill ``embedding`` from the bytes column, ``BACKFILL_BATCH`` rows per statement."""
    import numpy as np

    select = sql.SQL(
        "SELECT id, vector, dimension FROM {} WHERE embedding IS NULL ORDER BY id LIMIT %s"
    ).format(sql.Identifier(table))
    update = sql.SQL(
        "UPDATE {} t SET embedding = u.e::vector FROM unnest(%s::text[], %s::text[]) AS u(id, e) "
        "WHERE t.id = u.id"
    ).format(sql.Identifier(table))
    filled = 0
    while rows := conn.execute(select, (BACKFILL_BATCH,)).fetchall():
        texts = [literal(np.frombuffer(row[1], dtype="float32")) for row in rows]
        conn.execute(update, ([row[0] for row in rows], texts))
        filled += len(rows)
    if filled:
        logger.info("pgvector: filled the embedding column of %d rows of %s", filled, table)


__all__ = ["BACKFILL_BATCH", "enable", "literal"]
