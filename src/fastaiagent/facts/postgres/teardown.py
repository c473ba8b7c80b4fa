"""Dropping everything a Postgres fact store made (:meth:`PostgresFactStore.destroy`).

A store on table ``<t>`` makes, in the database's current schema:

- the fact table ``<t>``, its windows and items tables (``<t>_windows``,
  ``<t>_items``; ``conversation_windows`` and ``namespaced_items`` beside the
  default ``learned_memory``);
- per vector size, the tables of a vector index named after a base (``<t>``,
  and ``<t>_d<size>`` for the sizes beside it): ``<base>_vectors``,
  ``_vector_ns``, ``_vector_terms``, ``_embeddings``, ``_vector_meta``, with
  the trigger functions named after ``<base>_vectors`` (its sequence and
  indexes go with its table);
- one row per component in ``fastaiagent_schema`` (shared by every store: only
  these rows go).

Only names of that pattern are touched: another store's table, even one whose
name starts with ``<t>``, is left alone (a store on ``<t>_d<n>`` is the one
exception the naming allows: its vector tables are those of ``<t>``'s size ``n``).
"""

from __future__ import annotations

import re
from typing import Any

from fastaiagent._schema import VERSION_TABLE
from fastaiagent.facts.postgres.items import items_table_for
from fastaiagent.facts.postgres.store import sql
from fastaiagent.facts.postgres.vectors import vectors_table_for
from fastaiagent.facts.postgres.windows import windows_table_for

VECTOR_TABLES = ("vectors", "vector_ns", "vector_terms", "embeddings", "vector_meta")
"""The tables of a vector index, ``<base>_<name>``."""
VECTOR_FUNCTIONS = ("kw_stats", "kw_terms", "newest")
"""Its functions, ``<base>_vectors_<name>`` (triggers and the newest-rows read)."""


def vector_bases(conn: Any, table: str) -> list[str]:
    """``table`` and every ``<table>_d<size>`` a vector index of another size was made
    under (found by its tables, so an index no process recorded goes too)."""
    pattern = "^" + re.escape(table) + r"_d[0-9]+_(" + "|".join(VECTOR_TABLES) + ")$"
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename ~ %s",
        (pattern,),
    ).fetchall()
    sized = {re.sub(r"_(" + "|".join(VECTOR_TABLES) + ")$", "", row[0]) for row in rows}
    return [table, *sorted(sized)]


def family(conn: Any, table: str) -> tuple[list[str], list[str], list[str]]:
    """``(tables, functions, schema components)`` of the store on fact table ``table``."""
    windows, items = windows_table_for(table), items_table_for(table)
    tables, functions = [table, windows, items], []
    components = [f"facts:{table}", f"windows:{windows}", f"items:{items}"]
    for base in vector_bases(conn, table):
        vectors = vectors_table_for(base)
        tables += [f"{base}_{name}" for name in VECTOR_TABLES]
        functions += [f"{vectors}_{name}" for name in VECTOR_FUNCTIONS]
        components.append(f"vectors:{vectors}")
    return tables, functions, components


def drop_family(conn: Any, table: str) -> int:
    """Drop the store's tables, functions and schema rows in one transaction on
    ``conn`` (autocommit); returns how many of its tables existed."""
    with conn.transaction():
        tables, functions, components = family(conn, table)
        found = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() "
            "AND tablename = ANY(%s)",
            (tables,),
        ).fetchone()[0]
        # No CASCADE: what another owner built on a table of the store (a view, a
        # foreign key) makes the drop fail, naming it, instead of going with it.
        for name in tables:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
        for name in functions:
            conn.execute(sql.SQL("DROP FUNCTION IF EXISTS {}").format(sql.Identifier(name)))
        if conn.execute("SELECT to_regclass(%s)", (VERSION_TABLE,)).fetchone()[0] is not None:
            conn.execute(f"DELETE FROM {VERSION_TABLE} WHERE component = ANY(%s)", (components,))
    return int(found)


__all__ = ["VECTOR_FUNCTIONS", "VECTOR_TABLES", "drop_family", "family", "vector_bases"]
