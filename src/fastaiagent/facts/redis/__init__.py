"""The Redis backend (redis-py), one module per part:

- ``store.py``: :class:`RedisFactStore` (facts, history, validity);
- ``client.py``: the outage-gated client and how driver errors are classified;
- ``cluster.py`` and ``spread.py``: Redis Cluster (slot-routed writes that wait
  for replicas, the id map) and the fact store's work across subjects there;
- ``layout.py`` and ``lua.py``: the key layout and the server-side scripts;
- ``windows.py``, ``items.py``, ``vectors.py``: shared windows, namespaced
  items, and the vector index with its keyword postings.

Importing it needs the ``redis`` extra (``pip install 'fastaiagent[redis]'``).
"""

from __future__ import annotations

from fastaiagent.facts.redis.store import RedisFactStore

__all__ = ["RedisFactStore"]
