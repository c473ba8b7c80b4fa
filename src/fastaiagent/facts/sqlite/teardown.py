"""Dropping everything a SQLite fact store made in its file (:meth:`SQLiteFactStore.destroy`).

The store's parts record themselves in the file's ``fastaiagent_schema`` table,
one component each: ``facts:learned_memory``, ``windows:<table>``,
``items:<table>`` and ``vectors:<table>`` (one per vector size). Each one's
tables go (a vector index's companions too, :data:`VECTOR_COMPANIONS`; indexes,
triggers and FTS5 shadow tables with them), and its row; the default tables go
even when no row names them (a file written before versions were recorded). The
trace store's tables, should it share the file, and tables of anyone else stay,
and so does the file (delete it, or VACUUM it, to get the space back).
"""

from __future__ import annotations

import sqlite3

from fastaiagent._schema import VERSION_TABLE
from fastaiagent.facts.sqlite.items import DEFAULT_TABLE as DEFAULT_ITEMS
from fastaiagent.facts.sqlite.store import FACTS_SCHEMA
from fastaiagent.facts.sqlite.vectors import DEFAULT_TABLE as DEFAULT_VECTORS
from fastaiagent.facts.sqlite.vectors_schema import VECTOR_COMPANIONS
from fastaiagent.facts.sqlite.windows import DEFAULT_TABLE as DEFAULT_WINDOWS

KINDS = ("facts", "windows", "items", "vectors")
"""The components of a fact store (the trace store's are not)."""
_DEFAULTS = (
    FACTS_SCHEMA.component,
    f"windows:{DEFAULT_WINDOWS}",
    f"items:{DEFAULT_ITEMS}",
    f"vectors:{DEFAULT_VECTORS}",
)


def drop_components(conn: sqlite3.Connection) -> int:
    """Drop the fact store's tables and version rows on ``conn`` (inside the caller's
    write transaction); returns how many tables there were."""
    components = set(_DEFAULTS)
    has_versions = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (VERSION_TABLE,)
    ).fetchone()
    if has_versions:
        rows = conn.execute(f"SELECT component FROM {VERSION_TABLE}").fetchall()
        components |= {row[0] for row in rows if row[0].split(":", 1)[0] in KINDS}
    names: list[str] = []
    for component in sorted(components):
        kind, table = component.split(":", 1)
        names.append(table)
        if kind == "vectors":
            names += [f"{table}_{suffix}" for suffix in VECTOR_COMPANIONS]
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    dropped = [name for name in names if name in tables]
    for name in dropped:
        conn.execute(f'DROP TABLE IF EXISTS "{name}"')
    if has_versions:
        marks = ", ".join("?" * len(components))
        conn.execute(
            f"DELETE FROM {VERSION_TABLE} WHERE component IN ({marks})", sorted(components)
        )
        if conn.execute(f"SELECT count(*) FROM {VERSION_TABLE}").fetchone()[0] == 0:
            conn.execute(f"DROP TABLE {VERSION_TABLE}")
    return len(dropped)


__all__ = ["KINDS", "drop_components"]
