"""The everyday read path through the public API only, so one copy of this file
times any commit (``bench/compare.py`` runs it on an older one too).

Workload: 50 users x 20 facts on SQLite written by ``Memory(agent_id=...)``
(so every fact carries agent metadata), an instant test LLM. Figures:

- ``persist_per_s``: facts a second through ``Memory.persist``;
- ``retrieve_p50_us``: ``retrieve(tier="user", id=...)`` of a 20-fact user;
- ``turn_overhead_p50_us``: ``Agent.run`` with the Memory minus without;
- ``read_big_p50_us`` / ``big_over_small``: the same retrieve after 100k facts of
  1,000 other users were added (read cost should not grow with the store).

Run: ``python bench/read_path.py [--calls N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import percentile, time_calls

from fastaiagent import Agent, Memory
from fastaiagent.testing import CannedLLM

USERS, FACTS, OTHERS, OTHER_FACTS = 50, 20, 1_000, 100


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


def run(calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "memory.db"
        memory = Memory(f"sqlite:///{db}", agent_id="support")
        memory.persist("opens the file", tier="user", id="warm-up")  # schema made: not timed
        started = time.perf_counter()
        for u in range(USERS):
            for f in range(FACTS):
                memory.persist(f"user {u} fact {f}: likes item {f * 7 % 13}", tier="user", id=f"u{u}")
        persist_per_s = USERS * FACTS / (time.perf_counter() - started)

        def read(i: int) -> None:
            memory.retrieve(tier="user", id=f"u{i % USERS}")

        small = time_calls(read, calls)
        llm = CannedLLM("ok")
        plain = Agent(name="bench", llm=llm, system_prompt="Be brief.")
        remembering = Agent(
            name="bench", llm=llm, system_prompt="Be brief.",
            memory=Memory(f"sqlite:///{db}", user_id="u7", agent_id="support"),
        )  # fmt: skip
        turns = max(500, calls // 3)
        without, with_memory = [], []
        for _ in range(3):  # alternated, so drift in the machine's load hits both
            llm.calls.clear()
            without += time_calls(lambda i: plain.run("hello"), turns, warmup=50)
            llm.calls.clear()
            with_memory += time_calls(lambda i: remembering.run("hello"), turns, warmup=50)
        fill_others(db)
        big = time_calls(read, calls)
        return {
            "persist_per_s": round(persist_per_s, 1),
            "retrieve_p50_us": p50_us(small),
            "turn_overhead_p50_us": round(p50_us(with_memory) - p50_us(without), 4),
            "read_big_p50_us": p50_us(big),
            "big_over_small": round(percentile(big, 50) / percentile(small, 50), 3),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3_000)
    parser.add_argument("--json", action="store_true", help="one JSON line (for bench/compare.py)")
    args = parser.parse_args()
    figures = run(args.calls)
    print(json.dumps(figures) if args.json else "\n".join(f"{k}: {v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
