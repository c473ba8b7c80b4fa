"""How fast the Memory page renders over a big fact store.

100k facts (default) across 1,000 users and 10 agents, 5% of them superseded,
in a SQLite store. Each case requests the page through the real ASGI app
(FastAPI TestClient: routing, store queries, template rendering, escaping)
and reports the latency. Target: the first page of 100k facts in <= 200 ms.

Run: ``python bench/ui_memory_page.py [--facts N] [--users N] [--requests N]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _common import summary, write_results

from fastaiagent.facts.scoping import normalize_text
from fastaiagent.learn import MemoryStore

TARGET_MS = 200.0


def seed(store: MemoryStore, facts: int, users: int) -> None:
    """Bulk-load facts straight into the table (add() one by one would take minutes)."""
    rows = []
    now = time.time() - facts
    for i in range(facts):
        if i % 10 == 0:
            scope, scope_id = "agent", f"agent-{i % 10}"
        else:
            scope, scope_id = "user", f"user-{i % users}"
        text = f"fact {i}: prefers option {i % 17} and lives in city {i % 101}"
        rows.append((text, normalize_text(text), scope, scope_id, "", 1.0, "manual", None, now + i, "{}"))
    with store._write() as conn:
        conn.executemany(
            "INSERT INTO learned_memory (fact, fact_key, scope, scope_id, project_id, confidence, "
            "source, source_trace_id, created_at, metadata) VALUES (?,?,?,?,?,?,?,?,?,?)",
            rows,
        )
        # Every 20th fact is replaced by the next fact of the same subject: history rows.
        conn.execute(
            "UPDATE learned_memory SET superseded_by = id + ? WHERE id % 20 = 0 AND id + ? <= ?",
            (users, users, facts),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--facts", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()

    from fastapi.testclient import TestClient

    from fastaiagent.ui import create_app

    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "facts.db")
        started = time.perf_counter()
        seed(store, args.facts, args.users)
        seed_s = time.perf_counter() - started
        client = TestClient(create_app(store, trace_db=Path(tmp) / "traces.db"), base_url="http://127.0.0.1")
        cases = {
            "first_page": "/memory",
            "first_page_with_superseded": "/memory?superseded=1",
            "first_page_masked": "/memory?mask=1",
            "one_user": "/memory?scope=user:user-7",
            "page_100": "/memory?page=100",
        }
        results: dict[str, dict[str, float]] = {}
        for name, url in cases.items():
            response = client.get(url)  # warm: first connection, template compile
            assert response.status_code == 200, (url, response.status_code)
            samples = []
            for _ in range(args.requests):
                t0 = time.perf_counter()
                response = client.get(url)
                samples.append((time.perf_counter() - t0) * 1000)
            results[name] = summary(samples)
        store.close()

    first = results["first_page"]["p50_ms"]
    payload = {
        "facts": args.facts,
        "users": args.users,
        "seed_seconds": round(seed_s, 2),
        "target_first_page_ms": TARGET_MS,
        "meets_target": first <= TARGET_MS,
        **results,
    }
    path = write_results("ui_memory_page", payload)
    print(f"Memory page over {args.facts:,} facts ({args.users:,} users); target first page <= {TARGET_MS} ms")
    print(f"{'case':<30}{'p50 ms':>10}{'p99 ms':>10}")
    for name, stats in results.items():
        print(f"{name:<30}{stats['p50_ms']:>10.2f}{stats['p99_ms']:>10.2f}")
    print(f"first page {'meets' if first <= TARGET_MS else 'MISSES'} the target; results: {path}")


if __name__ == "__main__":
    main()
