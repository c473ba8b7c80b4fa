"""The everyday read path through the public API only, so one copy of this file
times any commit (``bench/compare.py`` runs it on an older one too).

Workload: 50 users x 20 facts on SQLite written by ``Memory(agent_id=...)``
(so every fact carries agent metadata), an instant test LLM. Figures:

- ``persist_per_s``: facts a second through ``Memory.persist``;
- ``retrieve_p50_us``: ``retrieve(tier="user", id=...)`` of a 20-fact user whose
  facts did not change since the last read (the repeated read);
- ``after_batch_p50_us``: the first read of each of 200 users right after 20 new
  facts were persisted for each (what an agent does after ``learn`` or the verbs
  wrote between turns);
- ``after_own_p50_us`` / ``after_other_p50_us``: a read right after one fact was
  persisted for the same subject / for another subject;
- ``turn_overhead_p50_us``: ``Agent.run`` with the Memory minus without;
- ``read_big_p50_us`` / ``big_over_small``: the same retrieve after 100k facts of
  1,000 other users were added (read cost should not grow with the store).

``--backend postgres`` / ``redis`` runs the same workload on the servers of
``.ci/run`` (a table or key prefix of its own, dropped at the end; the turn and
big-store figures are SQLite's only).

Run: ``python bench/read_path.py [--calls N] [--backend sqlite|postgres|redis] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import percentile, time_calls

from fastaiagent import Agent, Memory
from fastaiagent.testing import CannedLLM

USERS, FACTS, OTHERS, OTHER_FACTS = 50, 20, 1_000, 100
POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/0"


def p50_us(samples: list[float]) -> float:
    return round(percentile(samples, 50) * 1000, 4)


def fill_others(db: Path) -> None:
    """100k facts of 1,000 other users, copied from one stored row by SQL (any schema
    version: every column but the id, subject and text keeps the row's value)."""
    conn = sqlite3.connect(db)
    columns = [row[1] for row in conn.execute("PRAGMA table_info(learned_memory)") if row[1] != "id"]
    made = {"scope_id": "'other-' || (n / 100)", "fact": "'other fact ' || n", "fact_key": "'other fact ' || n"}
    select = ", ".join(made.get(column, column) for column in columns)
    conn.execute(
        f"WITH RECURSIVE seq(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM seq WHERE n < {OTHERS * OTHER_FACTS - 1}) "
        f"INSERT INTO learned_memory ({', '.join(columns)}) SELECT {select} FROM seq, "
        "(SELECT * FROM learned_memory ORDER BY id LIMIT 1)"
    )
    conn.commit()
    conn.close()


def location(backend: str, tmp: str) -> tuple[str, Any]:
    """The location URL of ``backend`` for this run, and a callable that drops what
    the run wrote there (raw SQL / keys: an older commit has no drop verb)."""
    tag = f"bench_rp_{uuid.uuid4().hex[:8]}"
    if backend == "postgres":
        import psycopg

        def drop_tables() -> None:
            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                names = conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (tag + "%",))
                for (name,) in names.fetchall():
                    conn.execute(f'DROP TABLE IF EXISTS "{name}" CASCADE')
                conn.execute("DELETE FROM fastaiagent_schema WHERE component LIKE %s", (f"%{tag}%",))

        return f"{POSTGRES_URL}?table={tag}", drop_tables
    if backend == "redis":
        import redis

        def drop_keys() -> None:
            client = redis.Redis.from_url(REDIS_URL)
            for key in client.scan_iter(match=f"{tag}*", count=1000):
                client.delete(key)

        return f"{REDIS_URL}?prefix={tag}", drop_keys
    return f"sqlite:///{Path(tmp) / 'memory.db'}", lambda: None


def reads_after_writes(memory: Memory, calls: int) -> dict[str, float]:
    """The read right after a write: of 200 users each once after a batch of writes,
    and of one subject after a write to it or to another subject."""
    after_batch: list[float] = []
    for batch in range(3):
        users = [f"b{batch}-{u}" for u in range(200)]
        for user in users:
            for f in range(FACTS):
                memory.persist(f"{user} fact {f}: likes item {f * 7 % 13}", tier="user", id=user)
        for user in users:
            started = time.perf_counter()
            memory.retrieve(tier="user", id=user)
            after_batch.append((time.perf_counter() - started) * 1000)

    def own(i: int) -> None:
        memory.persist(f"own write {i}", tier="user", id=f"u{i % USERS}")
        started = time.perf_counter()
        memory.retrieve(tier="user", id=f"u{i % USERS}", limit=FACTS)
        timed.append((time.perf_counter() - started) * 1000)

    def other(i: int) -> None:
        memory.persist(f"other write {i}", tier="user", id="writer")
        started = time.perf_counter()
        memory.retrieve(tier="user", id=f"u{i % USERS}", limit=FACTS)
        timed.append((time.perf_counter() - started) * 1000)

    figures = {"after_batch_p50_us": p50_us(after_batch)}
    for name, step in (("after_own", own), ("after_other", other)):
        timed: list[float] = []
        for i in range(min(calls, 1_000)):
            step(i)
        figures[f"{name}_p50_us"] = p50_us(timed)
    return figures


def run(calls: int, backend: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        where, drop = location(backend, tmp)
        try:
            return measure(where, backend, calls, Path(tmp) / "memory.db")
        finally:
            drop()


def measure(where: str, backend: str, calls: int, db: Path) -> dict[str, Any]:
    memory = Memory(where, agent_id="support")
    memory.persist("opens the file", tier="user", id="warm-up")  # schema made: not timed
    started = time.perf_counter()
    for u in range(USERS):
        for f in range(FACTS):
            memory.persist(f"user {u} fact {f}: likes item {f * 7 % 13}", tier="user", id=f"u{u}")
    persist_per_s = USERS * FACTS / (time.perf_counter() - started)

    def read(i: int) -> None:
        memory.retrieve(tier="user", id=f"u{i % USERS}")

    small = time_calls(read, calls)
    figures: dict[str, Any] = {"persist_per_s": round(persist_per_s, 1), "retrieve_p50_us": p50_us(small)}
    figures.update(reads_after_writes(memory, calls))
    if backend != "sqlite":
        return figures
    llm = CannedLLM("ok")
    plain = Agent(name="bench", llm=llm, system_prompt="Be brief.")
    remembering = Agent(
        name="bench", llm=llm, system_prompt="Be brief.",
        memory=Memory(where, user_id="u7", agent_id="support"),
    )  # fmt: skip
    turns = max(500, calls // 3)
    without, with_memory = [], []
    for _ in range(3):  # alternated, so drift in the machine's load hits both
        llm.calls.clear()
        without += time_calls(lambda i: plain.run("hello"), turns, warmup=50)
        llm.calls.clear()
        with_memory += time_calls(lambda i: remembering.run("hello"), turns, warmup=50)
    figures["turn_overhead_p50_us"] = round(p50_us(with_memory) - p50_us(without), 4)
    fill_others(db)
    big = time_calls(lambda i: read(i + 1), calls)  # u1.. : the first pass reads from the file again
    figures["read_big_p50_us"] = p50_us(big)
    figures["big_over_small"] = round(percentile(big, 50) / percentile(small, 50), 3)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3_000)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "redis"), default="sqlite")
    parser.add_argument("--json", action="store_true", help="one JSON line (for bench/compare.py)")
    args = parser.parse_args()
    figures = run(args.calls, args.backend)
    print(json.dumps(figures) if args.json else "\n".join(f"{k}: {v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
