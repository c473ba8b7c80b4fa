"""VectorStore backends: ``faiss`` (in-process), ``qdrant`` and ``chroma``.

Import the one you use, e.g. ``from fastaiagent.kb.backends.faiss import FaissVectorStore``;
each needs its extra (``fastaiagent[faiss]``, ``[qdrant]``, ``[chroma]``).
"""
