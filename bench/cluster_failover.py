"""Writes through a Redis Cluster failover: what each write was told, and what is there.

A private cluster (three primaries, one replica each; ``tests/_env.py`` starts
it) takes writes from one thread while the primary of one subject is killed
(-9), its replica promoted, and, after ``--alone`` seconds of writes with no
replica behind the new primary, the old node restarted as its replica. Every
write is counted by what it returned: stored and replicated, stored with an
``UnreplicatedWriteWarning`` (turned into an error here, so it is counted; the
write is stored all the same), or refused with an error. Then every write is
looked for. ``lost`` (told stored, not there) and ``refused_but_there`` (told
failed, there: a caller's retry would write twice) must be 0.

Run: ``python bench/cluster_failover.py [--alone 5] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _env import (
    replica_of,
    start_redis_cluster,
    wait_cluster_ok,
    wait_promoted,
    wait_replicas_linked,
)
from fastaiagent.errors import StoreUnavailableError, UnreplicatedWriteWarning
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.redis.store import RedisFactStore


def run(alone: float) -> dict[str, Any]:
    told: dict[str, list[tuple[str, str]]] = {"replicated": [], "unreplicated": [], "refused": []}
    stop = threading.Event()
    with tempfile.TemporaryDirectory() as tmp:
        cluster = start_redis_cluster(Path(tmp))
        try:
            store = RedisFactStore(cluster.url, prefix=f"bench_cf_{uuid.uuid4().hex[:8]}")

            def writer() -> None:
                n = 0
                while not stop.is_set():
                    sid, text = f"user-{n % 40}", f"fact number {n}"
                    try:
                        store.add(Fact(text, scope="user", scope_id=sid))
                        told["replicated"].append((sid, text))
                    except UnreplicatedWriteWarning:
                        told["unreplicated"].append((sid, text))
                    except StoreUnavailableError:
                        told["refused"].append((sid, text))
                    n += 1

            with warnings.catch_warnings():
                warnings.simplefilter("error", UnreplicatedWriteWarning)
                thread = threading.Thread(target=writer)
                thread.start()
                time.sleep(2)
                victim = store.client.get_node_from_key(store._sk("hist", store._subject("user", "user-0", "")))
                survivors = [p for p in cluster.ports if p != int(victim.port)]
                heir = replica_of(survivors, int(victim.port))
                cluster.kill(int(victim.port))
                promoted_after = wait_promoted(heir)
                wait_cluster_ok(survivors, timeout=60)
                time.sleep(alone)
                cluster.restart(int(victim.port))
                wait_cluster_ok(cluster.ports, timeout=60)
                wait_replicas_linked(cluster.ports, timeout=60)
                time.sleep(2)
                stop.set()
                thread.join(60)
            reader = RedisFactStore(cluster.url, prefix=store.prefix)
            there: dict[str, set[str]] = {}
            for sid in {sid for writes in told.values() for sid, _ in writes}:
                there[sid] = {f.fact for f in reader.list_active("user", sid, limit=None)}
            reader.close()
            store.close()
        finally:
            cluster.stop()
    found = {kind: sum(text in there.get(sid, set()) for sid, text in writes) for kind, writes in told.items()}
    return {
        **{f"told_{kind}": len(writes) for kind, writes in told.items()},
        **{f"found_{kind}": count for kind, count in found.items()},
        "lost": len(told["replicated"]) + len(told["unreplicated"]) - found["replicated"] - found["unreplicated"],
        "refused_but_there": found["refused"],
        "promotion_s": round(promoted_after, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--alone", type=float, default=5.0, help="seconds the promoted primary has no replica")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = run(args.alone)
    print(json.dumps(figures) if args.json else "\n".join(f"{k}: {v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
