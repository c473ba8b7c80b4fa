"""Shared windows on Redis: throughput with 1, 2 and 4 worker processes, and the
per-turn overhead of shared windows over in-process windows.

- ``throughput``: N spawned workers (1, 2, 4) share one Redis; each takes turns
  for users drawn at random from a common pool (no sticky sessions), with an
  instant test LLM (CannedLLM), for a fixed time. Reported: turns/s in total.
- ``overhead``: one process, Memory(user_id=resolver) on Redis facts, window=20
  (full windows), p50/p99 of Agent.run with ``window_store=None`` vs
  ``window_store="shared"``. Two shared cases: ``shared_same_worker`` (the cached
  state is current: one version check + one compare-and-set write per turn) and
  ``shared_alternating`` (two Memory objects take turns, so every turn reloads
  the state another "worker" wrote). Target: <= 1 ms added at p50 on loopback.

Run: ``python bench/scale_out.py [--seconds S] [--turns N] [--users N]``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import summary, time_calls, write_results

from fastaiagent import Agent, Memory
from fastaiagent.testing import CannedLLM

REDIS_URL = os.environ.get("FASTAIAGENT_BENCH_REDIS", "redis://127.0.0.1:6379/0")
WINDOW = 20


def make_memory(prefix: str, windows: str | None) -> Memory:
    from fastaiagent.facts.redis.store import RedisFactStore

    store = RedisFactStore(REDIS_URL, prefix=prefix)
    return Memory(store, user_id=str, window=WINDOW, window_store=windows)


def make_agent(memory: Memory) -> Agent:
    return Agent(name="bench", llm=CannedLLM("Sure - noted, thanks."), system_prompt="Be brief.", memory=memory)


def question(i: int) -> str:
    return f"Question number {i}: what was the thing I told you about my order?"


# -- throughput ---------------------------------------------------------------


def _worker(prefix: str, users: int, seconds: float, start: Any, results: Any) -> None:
    agent = make_agent(make_memory(prefix, "shared"))
    rng = random.Random(os.getpid())
    agent.run("warm up", context="warmup-user")
    start.wait()
    done, deadline, cpu = 0, time.perf_counter() + seconds, time.process_time()
    while time.perf_counter() < deadline:
        agent.run(question(done), context=f"user-{rng.randrange(users)}")
        done += 1
    results.put((done, time.process_time() - cpu))


def throughput(prefix: str, workers: int, users: int, seconds: float) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    start, results = ctx.Barrier(workers + 1), ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(prefix, users, seconds, start, results)) for _ in range(workers)
    ]
    for proc in procs:
        proc.start()
    start.wait()
    began = time.perf_counter()
    reports = [results.get(timeout=seconds + 120) for _ in procs]
    elapsed = time.perf_counter() - began
    for proc in procs:
        proc.join()
    turns, cpu = sum(r[0] for r in reports), sum(r[1] for r in reports)
    return {
        "workers": workers,
        "turns": turns,
        "seconds": round(elapsed, 2),
        "turns_per_s": round(turns / elapsed, 1),
        # CPU per turn in the workers: what the machine's load cannot blur.
        "worker_cpu_ms_per_turn": round(1000 * cpu / max(1, turns), 3),
    }


# -- per-turn overhead --------------------------------------------------------------


def overhead(prefix: str, turns: int, users: int) -> dict[str, Any]:
    local = make_agent(make_memory(prefix + "-local", None))
    shared = make_agent(make_memory(prefix + "-shared", "shared"))
    worker_a = make_agent(make_memory(prefix + "-alt", "shared"))
    worker_b = make_agent(make_memory(prefix + "-alt", "shared"))

    def user(i: int) -> str:
        return f"user-{i % users}"

    for agent in (local, shared, worker_a):  # full windows before timing
        for i in range(users * WINDOW // 2):
            agent.run(question(i), context=user(i))

    def alternate(i: int) -> Any:
        return (worker_a if (i // users) % 2 else worker_b).run(question(i), context=user(i))

    def measure(fn: Any) -> dict[str, float]:
        cpu = time.process_time()
        stats = summary(time_calls(fn, turns))
        # This process's CPU per turn (warm-up included): robust on a busy machine.
        stats["cpu_ms_per_turn"] = round(1000 * (time.process_time() - cpu) / (turns + 200), 4)
        return stats

    cases = {
        "in_process": measure(lambda i: local.run(question(i), context=user(i))),
        "shared_same_worker": measure(lambda i: shared.run(question(i), context=user(i))),
        "shared_alternating": measure(alternate),
    }
    # The two store calls a shared-window turn adds, alone (a full 20-message state).
    sync = shared.memory._windows  # type: ignore[union-attr]
    state = shared.memory._users.get(user(0))  # type: ignore[union-attr]
    key, text = sync.key(user(0)), sync.encode(state)
    version = [sync.store.load(key).version]

    def save(i: int) -> None:
        version[0] = sync.store.save(key, text, version[0], sync.ttl_seconds)

    cases["store_load_unchanged"] = summary(time_calls(lambda i: sync.store.load(key, version[0]), turns))
    cases["store_save"] = summary(time_calls(save, turns))
    cases["store_save"]["state_bytes"] = len(text.encode())
    base = cases["in_process"]["p50_ms"]
    added = {name: round(cases[name]["p50_ms"] - base, 4) for name in ("shared_same_worker", "shared_alternating")}
    return {"cases": cases, "added_p50_ms": added, "target_added_p50_ms": 1.0}


def cleanup(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    for pattern in (f"{prefix}*",):
        keys = list(client.scan_iter(match=pattern, count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="run time per throughput case")
    parser.add_argument("--turns", type=int, default=3000, help="timed turns per overhead case")
    parser.add_argument("--users", type=int, default=200)
    args = parser.parse_args()

    prefix = f"fa_bench_scale_{uuid.uuid4().hex[:8]}"
    load_before = round(os.getloadavg()[0], 2)
    try:
        over = overhead(prefix, args.turns, args.users)
        runs = [throughput(prefix + f"-tp{n}", n, args.users, args.seconds) for n in (1, 2, 4)]
    finally:
        cleanup(prefix)
    results = {
        "cpus": os.cpu_count(),
        "load_average_1m_before_after": [load_before, round(os.getloadavg()[0], 2)],
        "users": args.users,
        "window": WINDOW,
        "throughput": runs,
        "overhead": over,
    }
    path = write_results("scale_out", results)
    print(
        f"Shared windows on Redis ({REDIS_URL}), {os.cpu_count()} CPUs, window={WINDOW}, "
        f"load average {results['load_average_1m_before_after']}"
    )
    for run in runs:
        print(
            f"  {run['workers']} worker(s): {run['turns_per_s']:>8} turns/s ({run['turns']} turns, "
            f"{run['worker_cpu_ms_per_turn']} ms worker CPU per turn)"
        )
    for name, case in over["cases"].items():
        cpu = f"  CPU {case['cpu_ms_per_turn']:.3f} ms/turn" if "cpu_ms_per_turn" in case else ""
        print(f"  {name:<20} p50 {case['p50_ms']:.3f} ms  p99 {case['p99_ms']:.3f} ms{cpu}")
    for name, added in over["added_p50_ms"].items():
        verdict = "OK" if added <= 1.0 else "over target"
        print(f"  added p50 {name:<20} {added:+.3f} ms (target <= 1 ms: {verdict})")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
