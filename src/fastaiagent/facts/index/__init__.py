"""The namespace-index core shared by the three store-backed vector indexes
(SQLite, Postgres, Redis): what a backend does not need to write again.

- ``matrix.py``: a namespace's vectors as one in-process matrix, rebuilt only
  when the store reports a change;
- ``keywords.py``: BM25 over the postings a backend returns;
- ``embedding_cache.py``: each text embedded once per embedder;
- ``reembed.py``: a changed embedder re-embedding a namespace in the background.

A backend persists rows and reports changes; ranking a recall result happens
above, in :mod:`fastaiagent.agent.memory_blocks.vector_ranking`.
"""
