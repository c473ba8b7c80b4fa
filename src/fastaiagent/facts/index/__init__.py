"""The namespace-index core shared by the three store-backed vector indexes
(SQLite, Postgres, Redis): what a backend does not need to write again.

- ``matrix.py``: a namespace's vectors as one in-process matrix
  (:class:`~fastaiagent.facts.index.matrix.NamespaceMatrix`), the copies an index
  holds within a byte budget, brought up to date by what the store reports
  changed (a :class:`~fastaiagent.facts.index.matrix.Change`), and the masked
  top-k a search ranks with;
- ``front.py``: :class:`~fastaiagent.facts.index.front.MatrixIndex`, the public
  side of the three indexes: every request checked once, hits built once;
- ``keywords.py``: BM25 over the postings a backend returns (the one scoring of
  the three);
- ``embedding_cache.py``: each text embedded once per embedder;
- ``reembed.py``: a changed embedder re-embedding a namespace in the background.

A backend persists rows and reports changes; ranking a recall result happens
above, in :mod:`fastaiagent.recall.ranking`.
"""
