"""Knowledge and recall infrastructure: embedders, vector stores, keyword search.

Heavy dependencies (faiss, qdrant-client, chromadb, sentence-transformers)
are imported only by the modules that need them.
"""

from fastaiagent.kb.protocols import Chunk, SearchHit, VectorStore

__all__ = ["Chunk", "SearchHit", "VectorStore"]
