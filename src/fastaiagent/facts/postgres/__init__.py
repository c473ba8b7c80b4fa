"""The Postgres backend (psycopg 3 + psycopg_pool), one module per part:

- ``store.py``: :class:`PostgresFactStore` (facts, history, validity, the pool);
- ``schema.py``: the fact table's DDL and schema versions;
- ``windows.py`` and ``items.py``: shared windows, namespaced items;
- ``vectors.py``, ``keywords.py``, ``pgvector.py``: the vector index, its
  full-text keyword side, and the pgvector column when the extension exists.

Importing it needs the ``postgres`` extra (``pip install 'fastaiagent[postgres]'``).
"""

from __future__ import annotations

from fastaiagent.facts.postgres.store import PostgresFactStore

__all__ = ["PostgresFactStore"]
