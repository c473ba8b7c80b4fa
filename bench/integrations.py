"""Framework adapter benchmark: the cost of one operation of each adapter, per backend.

- LangGraph checkpointer (FastAIAgentSaver): ``put`` of a checkpoint (a
  10-message state), ``put_writes`` (two writes), ``get_tuple`` of a thread's
  latest checkpoint (50 in the thread), ``list(limit=10)``;
- LangGraph store (FastAIAgentStore): ``put``, ``get``, ``search`` of a
  100-item namespace with a filter and without (limit 10);
- Agents SDK session (FastAIAgentSession): ``add_items`` (a user message and
  a reply), ``get_items(limit=20)`` of a 200-item session, ``pop_item``.

Baselines in the same process: LangGraph's InMemorySaver / InMemoryStore and
the SDK's SQLiteSession (a file). Results go to bench/results/integrations.json.

    python bench/integrations.py                 # all backends
    python bench/integrations.py --quick         # fewer samples
    python bench/integrations.py --backends sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import summary, time_calls, write_results
from agents.memory import SQLiteSession
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from fastaiagent.integrations.langgraph import FastAIAgentSaver, FastAIAgentStore
from fastaiagent.integrations.openai_agents import FastAIAgentSession

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/0"


@contextmanager
def fact_store(backend: str) -> Iterator[Any]:
    """A fresh fact store on ``backend``, its data removed afterwards."""
    name = f"fa_bench_{uuid.uuid4().hex[:8]}"
    if backend == "sqlite":
        from fastaiagent.facts.sqlite.store import SQLiteFactStore

        yield SQLiteFactStore(Path(tempfile.mkdtemp()) / "bench.db")
    elif backend == "postgres":
        import psycopg

        from fastaiagent.facts.postgres.store import PostgresFactStore

        store = PostgresFactStore(POSTGRES_URL, table=name)
        try:
            yield store
        finally:
            store.close()
            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                for table in (name, f"{name}_items"):
                    conn.execute(f'DROP TABLE IF EXISTS "{table}"')
    else:
        from fastaiagent.facts.redis.store import RedisFactStore

        store = RedisFactStore(REDIS_URL, prefix=name)
        try:
            yield store
        finally:
            keys = list(store.client.scan_iter(match=name + ":*", count=1000))
            for i in range(0, len(keys), 500):
                store.client.delete(*keys[i : i + 500])


def checkpoint_ops(saver: Any, count: int) -> dict[str, Any]:
    state = {"messages": [f"message number {i} of the conversation" for i in range(10)]}
    thread = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}
    last = thread

    def put(i: int) -> None:
        nonlocal last
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = state
        checkpoint["channel_versions"] = {"messages": i + 1}
        last = saver.put(last, checkpoint, {"source": "loop", "step": i}, {"messages": i + 1})

    out = {"put": summary(time_calls(put, count, warmup=50))}
    # Writes go to a checkpoint of their own thread, so the latest one below holds
    # two pending writes, as after a typical step.
    other = saver.put({"configurable": {"thread_id": "w", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {})
    out["put_writes"] = summary(
        time_calls(lambda i: saver.put_writes(other, [("a", i), ("b", "x")], f"task-{i}"), count, warmup=50)
    )
    saver.put_writes(last, [("a", 1), ("b", "x")], "task")
    latest = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}
    out["get_tuple"] = summary(time_calls(lambda i: saver.get_tuple(latest), count, warmup=50))
    out["list10"] = summary(time_calls(lambda i: list(saver.list(latest, limit=10)), count // 2, warmup=20))
    return out


def store_ops(store: Any, count: int) -> dict[str, Any]:
    for i in range(100):
        store.put(("users", "bench"), f"seed{i}", {"kind": "a" if i % 2 else "b", "n": i})
    out = {"put": summary(time_calls(lambda i: store.put(("users", "w"), f"k{i % 50}", {"n": i}), count, warmup=50))}
    out["get"] = summary(time_calls(lambda i: store.get(("users", "bench"), f"seed{i % 100}"), count, warmup=50))
    out["search10"] = summary(time_calls(lambda i: store.search(("users", "bench"), limit=10), count, warmup=50))
    out["search_filter"] = summary(
        time_calls(lambda i: store.search(("users", "bench"), filter={"kind": "a"}, limit=10), count // 2, warmup=20)
    )
    return out


def session_ops(session: Any, count: int) -> dict[str, Any]:
    loop = asyncio.new_event_loop()
    run: Callable[[Any], Any] = loop.run_until_complete
    reply = [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "hi, how can I help?"}]
    run(session.add_items([{"role": "user", "content": f"m{i}"} for i in range(200)]))
    out = {"add_items": summary(time_calls(lambda i: run(session.add_items(reply)), count, warmup=50))}
    out["get_items20"] = summary(time_calls(lambda i: run(session.get_items(limit=20)), count, warmup=50))
    out["pop_item"] = summary(time_calls(lambda i: run(session.pop_item()), count, warmup=50))
    loop.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--backends", default="sqlite,postgres,redis")
    args = parser.parse_args()
    count = 200 if args.quick else 1000
    results: dict[str, Any] = {
        "baseline": {
            "checkpointer (InMemorySaver)": checkpoint_ops(InMemorySaver(), count),
            "store (InMemoryStore)": store_ops(InMemoryStore(), count),
            "session (SDK SQLiteSession, file)": session_ops(
                SQLiteSession("bench", str(Path(tempfile.mkdtemp()) / "s.db")), count
            ),
        }
    }
    for backend in args.backends.split(","):
        with fact_store(backend) as store:
            results[backend] = {
                "checkpointer": checkpoint_ops(FastAIAgentSaver(store), count),
                "store": store_ops(FastAIAgentStore(store), count),
                "session": session_ops(FastAIAgentSession("bench", store), count),
            }
    for name, groups in results.items():
        for group, ops in groups.items():
            cells = ", ".join(f"{op} {s['p50_ms'] * 1000:.0f} us" for op, s in ops.items())
            print(f"{name:9} {group:34} p50: {cells}")
    print("wrote", write_results("integrations", {"count": count, "results": results}))


if __name__ == "__main__":
    main()
