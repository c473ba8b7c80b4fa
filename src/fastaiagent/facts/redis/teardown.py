"""Deleting everything a Redis fact store wrote (:meth:`RedisFactStore.destroy`).

Every key a store writes starts with its escaped prefix and ``:``: its facts and
their indexes, its windows (``<prefix>:win:``), items (``<prefix>:it:``) and
vector indexes of every size (``<prefix>:vec:``, ``<prefix>:vec<size>:``), the
layout versions. An escaped prefix holds no ``:`` (it is percent-encoded), so
no other store's key starts with ``<prefix>:``: another store's keys, even
under a longer prefix that starts with this one, are never touched.
"""

from __future__ import annotations

from typing import Any

from fastaiagent.facts.redis.layout import glob_escape

BATCH = 500  # keys one UNLINK removes (a Redis Cluster splits it by slot)


def delete_prefix(client: Any, prefix: str) -> int:
    """UNLINK every key ``<prefix>:*`` (SCAN, on every primary of a cluster); returns
    how many were deleted. Not atomic: a key written meanwhile may stay."""
    deleted, batch = 0, []
    for key in client.scan_iter(match=glob_escape(prefix) + ":*", count=1000):
        batch.append(key)
        if len(batch) >= BATCH:
            deleted += int(client.unlink(*batch))
            batch = []
    if batch:
        deleted += int(client.unlink(*batch))
    return deleted


__all__ = ["delete_prefix"]
