"""Redis Cluster for the Redis stores: the client, writes that wait for replicas,
and the slots' own keys.

A store in cluster mode keeps every key of one subject in that subject's hash
slot (``{project:scope:scope_id}``), so each script call touches one slot. The
slot's own keys carry a short tag of the same slot (:func:`slot_tag`): its id
counter, its subjects set, and the hashes of its facts, whose ids name the slot
(``counter * 16384 + slot``), so a fact is found by id alone. A write is one
script call on the subject's primary followed, on the same connection, by
``WAIT <replicas> <timeout>``, so a write that returned was acknowledged by a
replica and survives a failover. A write the replicas did not acknowledge in
time is stored all the same (it reached the primary): it returns, with an
:class:`~fastaiagent.errors.UnreplicatedWriteWarning`, so nobody repeats it.
A cluster with no replica at all is seen when a store opens: by default its
writes wait for none (one warning says so); an explicit ``?wait_replicas=`` it
cannot meet is refused there.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from binascii import crc_hqx
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from fastaiagent._throttle import LogThrottle
from fastaiagent.errors import (
    InvalidValueError,
    StoreConfigError,
    UnreplicatedWriteWarning,
)
from fastaiagent.facts.redis.client import guarded_cluster_class, parsing, redis_lib

WAIT_TIMEOUT_MS = 2000
"""How long a write waits for its replicas before it returns unreplicated."""
UNREPLICATED_LOG_SECONDS = 60.0
"""At most one log line per store this often about unreplicated writes."""

logger = logging.getLogger("fastaiagent.facts.redis")
_unreplicated = LogThrottle(lambda: UNREPLICATED_LOG_SECONDS)
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


SLOTS = 16384
_tags: list[str] = []
_tags_lock = threading.Lock()


def slot_of(tag: str) -> int:
    """The hash slot of a key whose hash tag is ``tag`` (Redis's CRC16)."""
    return crc_hqx(tag.encode("utf-8"), 0) % SLOTS


def slot_tag(slot: int) -> str:
    """A short tag (hex) in ``slot``: the first of 0, 1, 2, ... there, so every
    process names a slot's keys alike. The table takes ~0.3 s, once a process."""
    if not _tags:
        with _tags_lock:
            if not _tags:
                found: list[str | None] = [None] * SLOTS
                left, n = SLOTS, 0
                while left:
                    tag = format(n, "x")
                    at = slot_of(tag)
                    if found[at] is None:
                        found[at], left = tag, left - 1
                    n += 1
                _tags.extend(t for t in found if t is not None)
    return _tags[slot]


def is_cluster(client: Any) -> bool:
    """True for a ``redis.cluster.RedisCluster``."""
    return isinstance(client, _cluster_mod.RedisCluster)


def cluster_client(url: str, **options: Any) -> Any:
    """A ``RedisCluster`` for ``url`` (any node), whose node connections consult each
    node's outage health (see :func:`~fastaiagent.facts.redis.client.guarded_client`)."""
    base = redis_lib.SSLConnection if url.startswith("rediss://") else redis_lib.Connection
    options.setdefault("connection_class", guarded_cluster_class(base))
    with parsing(url):
        return _cluster_mod.RedisCluster.from_url(url, **options)


def wait_replicas_option(value: str | None, cluster: bool) -> int | None:
    """The ``wait_replicas=`` option: replicas a write waits for (None: the cluster's
    default, see :class:`ClusterNamespace`)."""
    if value is None:
        return None if cluster else 0
    if not value.isdigit():
        raise InvalidValueError(f"wait_replicas must be a whole number, got {value!r}")
    if int(value) and not cluster:
        raise InvalidValueError("wait_replicas= needs a cluster location (?cluster=true)")
    return int(value)


def most_replicas(client: Any) -> int | None:
    """The most replicas connected to one primary, asked of the primaries themselves
    (the slots' map learns of replicas late, by gossip); None when none answered."""
    counts = []
    for node in client.get_primaries():
        with suppress(_errors.RedisError):
            counts.append(int(node.redis_connection.info("replication").get("connected_slaves", 0)))
    return max(counts) if counts else None


class ClusterNamespace:
    """The cluster side of one store namespace: slot-routed writes with WAIT.

    ``replicas`` None waits for one replica, or for none on a cluster that has no
    replica at all (said once, as a warning: a failed primary loses its writes).
    A number is what the caller asked for: a cluster with fewer replicas per
    primary is refused here, not with each write. (A slot left without its replica
    by a failover, in a cluster that has others, keeps waiting: its writes return
    unreplicated until a replica joins.)"""

    def __init__(self, client: Any, prefix: str, replicas: int | None, what: str) -> None:
        self.client, self.prefix, self.what = client, prefix, what
        most = most_replicas(client)
        if replicas is None:
            replicas = 1 if most is None else min(1, most)
            if not replicas:
                warnings.warn(UnreplicatedWriteWarning(
                    f"the Redis Cluster of {what} has no replicas: its writes wait for none, "
                    "and a primary that fails loses them; add a replica to each primary "
                    "(redis-cli --cluster add-node ... --cluster-slave) for writes that "
                    "survive a failover"
                ), stacklevel=3)  # fmt: skip
        elif most is not None and replicas > most:
            raise StoreConfigError(
                f"writes of {what} wait for {replicas} replicas (?wait_replicas={replicas}) but "
                f"no primary of the Redis Cluster has more than {most}: add replicas, or "
                f"lower ?wait_replicas= to {most} (writes a failover may lose)"
            )
        self.replicas = replicas

    def run(self, route_key: str, queue: Callable[[Any], None]) -> list[Any]:
        """Queue commands (``queue(pipe)``) on the primary of ``route_key``'s slot and
        run them with a WAIT after them, on one connection: WAIT counts the writes
        of its own connection. Retried while a slot moves or a failover runs (the
        store's writes may be repeated: they are idempotent)."""
        deadline, retried = time.monotonic() + RETRY_SECONDS, False
        while True:
            try:
                node = self.client.get_node_from_key(route_key)
                pipe = node.redis_connection.pipeline(transaction=False)
                if retried and self.replicas:
                    # The first try may have written on another connection: a write
                    # of this one makes its WAIT cover everything before it too.
                    pipe.set(self._settle_key(route_key), 1, px=1000)
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
                retried = True
        if retried and self.replicas:
            replies.pop(0)
        if self.replicas:
            acked = int(replies.pop())
            if acked < self.replicas:
                self._unreplicated(acked)
        return replies

    def _unreplicated(self, acked: int) -> None:
        said = (
            f"a write of {self.what} is stored on the primary of its slot, but {acked} of "
            f"the {self.replicas} replicas it waits for acknowledged it within "
            f"{WAIT_TIMEOUT_MS} ms: a failover now could lose it. Do not repeat it (it is "
            "stored); check the cluster's replicas, or lower ?wait_replicas="
        )
        warnings.warn(UnreplicatedWriteWarning(said), stacklevel=4)
        _unreplicated.warn(logger, (self.prefix, self.what), "%s", said)

    def script(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """One script call routed by its first key, with WAIT."""
        return self.run(keys[0], lambda pipe: script(keys=keys, args=args, client=pipe))[0]

    def counter_key(self, slot: int) -> str:
        """The id counter of ``slot``, named with the slot's tag (and number, which
        the scripts read): ids are ``counter * 16384 + slot``."""
        return f"{self.prefix}:seq:{{{slot_tag(slot)}}}:{slot}"

    def fact_key(self, fact_id: int) -> str:
        """A fact's hash, in the slot its id names."""
        return f"{self.prefix}:fact:{{{slot_tag(fact_id % SLOTS)}}}:{fact_id}"

    def prev_key(self, fact_id: int) -> str:
        """The ids a fact superseded, next to its hash."""
        return f"{self.prefix}:prev:{{{slot_tag(fact_id % SLOTS)}}}:{fact_id}"

    def _settle_key(self, route_key: str) -> str:
        """A short-lived key in ``route_key``'s slot, written by a retry."""
        return f"{self.prefix}:settle:{{{slot_tag(int(self.client.keyslot(route_key)))}}}"

    def _refresh(self) -> None:
        # no node answering yet is fine: the next attempt tries again
        with suppress(_errors.RedisError, _errors.RedisClusterException):
            self.client.nodes_manager.initialize()
