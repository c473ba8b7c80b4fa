"""Writes behind a transaction-mode PgBouncer whose URL does not say so: every write
the store acknowledged must be in the database, read back over a direct connection.

A private PgBouncer (Debian's ``pgbouncer``, transaction pooling, 8 server
connections) is started in front of the Postgres of ``.ci/run``; ``--threads``
workers each make ``--ops`` calls on one ``Memory`` whose location is the
pooler's URL *without* ``?pooler=transaction``: ``persist`` of a new fact, then
a ``retrieve`` of that user, so every query runs often enough to be prepared
were prepared statements on. Figures: writes acknowledged, writes refused with
an error, acknowledged writes found, acknowledged writes lost (must be 0).

Run: ``python bench/pooler_writes.py [--threads 16] [--ops 500] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _env import POSTGRES_URL, start_pgbouncer
from fastaiagent import Memory


def run(threads: int, ops: int) -> dict[str, Any]:
    import psycopg

    url, process, folder = start_pgbouncer(POSTGRES_URL)
    table = f"bench_pw_{uuid.uuid4().hex[:8]}"
    memory = Memory(f"{url}?table={table}")
    acknowledged: list[str] = []
    errors: dict[str, int] = {}
    lock = threading.Lock()

    def work(n: int) -> None:
        for i in range(ops):
            text = f"worker {n} fact {i}"
            try:
                memory.persist(text, tier="user", id=f"w{n}")
            except Exception as exc:  # counted: a refused write is allowed, a lost one is not
                with lock:
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                continue
            with lock:
                acknowledged.append(text)
            try:
                memory.retrieve(tier="user", id=f"w{n}", limit=5)
            except Exception as exc:
                with lock:
                    errors[f"read {type(exc).__name__}"] = errors.get(f"read {type(exc).__name__}", 0) + 1

    started = time.perf_counter()
    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - started
    try:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as direct:
            stored = {row[0] for row in direct.execute(f'SELECT fact FROM "{table}"').fetchall()}
    finally:
        memory.location.close()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as direct:  # whatever is left of the run
            for (name,) in direct.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (table + "%",)).fetchall():
                direct.execute(f'DROP TABLE IF EXISTS "{name}" CASCADE')
            direct.execute("DELETE FROM fastaiagent_schema WHERE component LIKE %s", (f"%:{table}%",))
        process.terminate()
        process.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
    lost = [text for text in acknowledged if text not in stored]
    return {
        "calls": threads * ops,
        "acknowledged": len(acknowledged),
        "refused": sum(v for k, v in errors.items() if not k.startswith("read")),
        "read_errors": sum(v for k, v in errors.items() if k.startswith("read")),
        "errors": errors,
        "found": len(acknowledged) - len(lost),
        "lost": len(lost),
        "pooler_detected": getattr(memory.location, "pooler", None),
        "seconds": round(seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--ops", type=int, default=500)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = run(args.threads, args.ops)
    print(json.dumps(figures) if args.json else "\n".join(f"{k}: {v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
