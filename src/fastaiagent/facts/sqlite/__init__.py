"""The SQLite backend (the embedded default), one module per part:

- ``store.py``: :class:`SQLiteFactStore` (facts, history, validity);
- ``windows.py``: shared conversation windows;
- ``items.py``: namespaced items (framework adapters' state);
- ``vectors.py`` and ``vectors_schema.py``: recall and semantic-fact vectors,
  FTS5 keyword postings, cached embeddings, and their tables.
"""

from __future__ import annotations

from fastaiagent.facts.sqlite.store import MemoryStore, SQLiteFactStore

__all__ = ["MemoryStore", "SQLiteFactStore"]
