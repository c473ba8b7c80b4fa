"""Redis Cluster for the Redis stores: the client, writes that wait for replicas,
and the namespace's id map.

A store in cluster mode keeps every key of one subject in that subject's hash
slot (``{project:scope:scope_id}``), so each script call touches one slot. What
spans subjects lives in the namespace's own slot (tag ``{<prefix>}``): the id
counter, ``where`` (fact id -> subject, for reads and writes by id) and the
``subjects`` set. A write is one script call on the subject's primary followed,
on the same connection, by ``WAIT <replicas> <timeout>``, so a write that
returned was acknowledged by a replica and survives a failover; the id map is
tidied in a second call (see :class:`ClusterNamespace`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from fastaiagent.errors import InvalidValueError, StoreUnavailableError
from fastaiagent.facts.redis.client import guarded_cluster_class, redis_lib

WAIT_TIMEOUT_MS = 2000
"""How long a write waits for its replicas before it is refused."""
ID_BLOCK = 64
"""Ids one counter call reserves for this process (one slot's round trip per 64 adds)."""
RETRY_SECONDS = 15.0
"""How long a write retries while the cluster moves a slot or promotes a replica."""

_cluster_mod = redis_lib.cluster
_errors = redis_lib.exceptions
_RETRIED = (
    _errors.AskError,  # MOVED and ASK
    _errors.TryAgainError,
    _errors.ClusterDownError,
    _errors.ConnectionError,
    _errors.TimeoutError,
    _errors.SlotNotCoveredError,
)


_RAISE = """
if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
"""


def is_cluster(client: Any) -> bool:
    """True for a ``redis.cluster.RedisCluster``."""
    return isinstance(client, _cluster_mod.RedisCluster)


def cluster_client(url: str, **options: Any) -> Any:
    """A ``RedisCluster`` for ``url`` (any node), whose node connections consult each
    node's outage health (see :func:`~fastaiagent.facts.redis.client.guarded_client`)."""
    base = redis_lib.SSLConnection if url.startswith("rediss://") else redis_lib.Connection
    options.setdefault("connection_class", guarded_cluster_class(base))
    return _cluster_mod.RedisCluster.from_url(url, **options)


def wait_replicas_option(value: str | None, cluster: bool) -> int:
    """The ``wait_replicas=`` option: replicas a write waits for (cluster default 1)."""
    if value is None:
        return 1 if cluster else 0
    if not value.isdigit():
        raise InvalidValueError(f"wait_replicas must be a whole number, got {value!r}")
    if int(value) and not cluster:
        raise InvalidValueError("wait_replicas= needs a cluster location (?cluster=true)")
    return int(value)


class ClusterNamespace:
    """The cluster side of one store namespace: slot-routed writes with WAIT, ids
    from the namespace's counter, and its id map / subjects set."""

    def __init__(self, client: Any, prefix: str, replicas: int, what: str) -> None:
        self.client, self.replicas, self.what = client, replicas, what
        tag = "{" + prefix + "}"
        self.seq_key = f"{prefix}:seq:{tag}"
        self.where_key = f"{prefix}:where:{tag}"
        self.subjects_key = f"{prefix}:subjects:{tag}"
        self._ids: list[int] = []
        self._pid = os.getpid()  # a forked child must not use its parent's reserved ids
        self._lock = threading.Lock()

    def run(self, route_key: str, queue: Callable[[Any], None]) -> list[Any]:
        """Queue commands (``queue(pipe)``) on the primary of ``route_key``'s slot and
        run them with a WAIT after them, on one connection: WAIT counts the writes
        of its own connection. Retried while a slot moves or a failover runs (the
        store's writes may be repeated: they are idempotent)."""
        deadline = time.monotonic() + RETRY_SECONDS
        while True:
            try:
                node = self.client.get_node_from_key(route_key)
                pipe = node.redis_connection.pipeline(transaction=False)
                queue(pipe)
                if self.replicas:
                    pipe.execute_command("WAIT", self.replicas, WAIT_TIMEOUT_MS)
                replies = list(pipe.execute())
                break
            except _RETRIED:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
                self._refresh()
        if self.replicas:
            acked = int(replies.pop())
            if acked < self.replicas:
                raise StoreUnavailableError(
                    f"a write of {self.what} reached the primary of its slot, but {acked} of "
                    f"the {self.replicas} replicas it waits for acknowledged it within "
                    f"{WAIT_TIMEOUT_MS} ms: it may not survive a failover. Check the "
                    "cluster's replicas (a primary left without one refuses writes), or "
                    "lower ?wait_replicas="
                )
        return replies

    def script(self, script: Any, route_key: str, args: list[Any]) -> Any:
        """One script call routed by ``route_key`` (its KEYS[1]), with WAIT."""
        return self.run(route_key, lambda pipe: script(keys=[route_key], args=args, client=pipe))[0]

    def _refresh(self) -> None:
        # no node answering yet is fine: the next attempt tries again
        with suppress(_errors.RedisError, _errors.RedisClusterException):
            self.client.nodes_manager.initialize()

    def next_id(self) -> int:
        """A fresh fact id from the namespace's counter, reserved :data:`ID_BLOCK` at a
        time (ids stay unique; across processes they no longer follow time)."""
        with self._lock:
            if self._pid != os.getpid():
                self._ids, self._pid = [], os.getpid()
            if not self._ids:
                top = int(self.run(self.seq_key, lambda p: p.incrby(self.seq_key, ID_BLOCK))[0])
                self._ids = list(range(top, top - ID_BLOCK, -1))
            return self._ids.pop()

    def give_back(self, fact_id: int) -> None:
        """An id a write did not use (the text was there already)."""
        with self._lock:
            if self._pid == os.getpid():
                self._ids.append(fact_id)

    def register(self, fact_id: int, member: str) -> None:
        """Map a new fact to its subject and list the subject (after the fact's write:
        a crash in between leaves a fact that ``reindex`` maps)."""

        def queue(pipe: Any) -> None:
            pipe.hset(self.where_key, str(fact_id), member)
            pipe.sadd(self.subjects_key, member)

        self.run(self.where_key, queue)

    def unregister(self, ids: list[str], emptied: str | None, hist_key: str) -> None:
        """Drop deleted ids from the map, and a subject that emptied from the set; a
        fact written to it meanwhile puts it back (checked after the removal)."""
        if ids:
            self.run(self.where_key, lambda pipe: pipe.hdel(self.where_key, *ids))
        if emptied is not None:
            self.run(self.where_key, lambda pipe: pipe.srem(self.subjects_key, emptied))
            if self.client.exists(hist_key):
                self.run(self.where_key, lambda pipe: pipe.sadd(self.subjects_key, emptied))

    def map_ids(self, members: dict[str, str]) -> None:
        """Map ids to subjects and list the subjects (repair; idempotent)."""

        def queue(pipe: Any) -> None:
            pipe.hset(self.where_key, mapping=members)
            pipe.sadd(self.subjects_key, *set(members.values()))

        self.run(self.where_key, queue)

    def raise_counter(self, highest: int) -> None:
        """The id counter to at least ``highest`` (after a repair found that id)."""

        def queue(pipe: Any) -> None:
            pipe.eval(_RAISE, 1, self.seq_key, highest)

        self.run(self.seq_key, queue)
        with self._lock:
            self._ids = [i for i in self._ids if i > highest]

    def subject_of(self, fact_ids: list[int]) -> list[str | None]:
        """The subject (escaped ``project:scope:scope_id``) of each id, None if unknown."""
        if not fact_ids:
            return []
        return list(self.client.hmget(self.where_key, [str(i) for i in fact_ids]))
