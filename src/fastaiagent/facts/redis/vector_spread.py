"""What :class:`~fastaiagent.facts.redis.vectors.RedisVectorIndex` does on a Redis
Cluster, where each namespace's keys share its own hash tag (``{v:<ns>}``) and a
script may touch one namespace only: the prefix's id map (chunk id -> namespace),
its namespace set and the dimension live in the prefix's slot and are kept here,
around the per-namespace scripts.

Order, so a crash leaves nothing a reader trusts wrongly: an add maps its chunks
before writing them (a map entry whose chunk is not there reads as nothing), a
delete removes the chunks before their map entries, and a namespace leaves the
set only once empty (put back when a write landed meanwhile).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastaiagent.facts.redis.store import RedisFactStore


class VectorSpread:
    """Cluster writes of the vector index (a mixin of ``RedisVectorIndex``)."""

    prefix: str
    cluster: bool
    store: RedisFactStore
    _client: Any
    _add: Any
    _delete: Any

    if TYPE_CHECKING:  # the index's own

        def _k(self, kind: str, ns: str = "") -> str: ...
        def _g(self, name: str) -> str: ...
        def _run(self, script: Any, args: list[Any], ns: str = "") -> Any: ...

    def _spread_add(self, rows: list[list[Any]], dimension: int) -> str | None:
        """Add rows (id, namespace key, vector, doc, terms, tfs, time): the dimension
        checked, chunks moving namespace dropped from the old one, the id map
        written, then one script per namespace. Returns the stored dimension when
        it differs (nothing written)."""
        dim = self._g("dim")
        stored = self._client.get(dim)
        if stored is None:
            self.store.run_commands(dim, lambda pipe: pipe.set(dim, dimension, nx=True))
            stored = self._client.get(dim)
        if int(stored) != dimension:
            return str(stored)
        ids = [row[0] for row in rows]
        moving: dict[str, list[str]] = defaultdict(list)
        for row, held in zip(rows, self._client.hmget(self._g("id"), ids), strict=True):
            if held is not None and held != row[1]:
                moving[held].append(row[0])
        for ns, moved in moving.items():
            self._spread_delete_in(ns, moved)
        by_ns: dict[str, list[Any]] = defaultdict(list)
        for row in rows:
            by_ns[row[1]] += row

        def mapping(pipe: Any) -> None:
            pipe.hset(self._g("id"), mapping={row[0]: row[1] for row in rows})
            pipe.sadd(self._g("ns"), *by_ns)

        self.store.run_commands(self._g("id"), mapping)
        for ns, flat in by_ns.items():
            self._run(self._add, [self.prefix, dimension, *flat], ns)
        return None

    def _spread_delete(self, ids: list[str]) -> int:
        """Delete chunks by id: their namespaces from the map, one script each."""
        by_ns: dict[str, list[str]] = defaultdict(list)
        for chunk_id, ns in zip(ids, self._client.hmget(self._g("id"), ids), strict=True):
            if ns is not None:
                by_ns[ns].append(chunk_id)
        return sum(self._spread_delete_in(ns, found) for ns, found in by_ns.items())

    def _spread_delete_in(self, ns: str, ids: list[str]) -> int:
        deleted = int(self._run(self._delete, [self.prefix, "=" + ns, *ids], ns))
        self._spread_unmap(ns, ids)
        if not self._client.hlen(self._k("d:", ns)):
            self._spread_unlist(ns)
        return deleted

    def _spread_unmap(self, ns: str, ids: list[str]) -> None:
        """Cluster: drop deleted chunks from the id map (one server: the script did)."""
        if self.cluster and ids:
            self.store.run_commands(self._g("id"), lambda pipe: pipe.hdel(self._g("id"), *ids))

    def _spread_unlist(self, ns: str) -> None:
        """Cluster: an emptied namespace leaves the set (back if written meanwhile)."""
        if not self.cluster:
            return
        self.store.run_commands(self._g("ns"), lambda pipe: pipe.srem(self._g("ns"), ns))
        if self._client.hlen(self._k("d:", ns)):
            self.store.run_commands(self._g("ns"), lambda pipe: pipe.sadd(self._g("ns"), ns))
