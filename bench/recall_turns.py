"""Recall turns as a user waits for them, on a busy machine.

One user has N recalled messages in the backend's durable index: texts from a
small vocabulary (for the keyword side), vectors drawn from a Gaussian with the
mean and covariance of the local embedder's vectors of 512 of those texts (what
the dense side's cost and the sketch's shortlist depend on is that spectrum,
not the words; embedding 100k texts would take the bench 15 minutes). With a CPU-busy neighbour process
running (started here: one core of two spinning), the bench times:

- ``query_embed_p50_ms``: the local embedder on one short query;
- ``warm_s``: ``Memory.warm()`` in the fresh process (model load);
- ``cold_first_turn_s``: the first ``Agent.run`` of a fresh process (new store
  objects): the namespace is read from the store, the query embedded;
- ``turn_p50_ms`` / ``turn_p99_ms``: the next turns (each embeds its question,
  recalls, records the new messages; with ``--reply`` a question, each next
  message is embedded with it, one more text per turn);
- ``dense_p50_ms``: the vector search alone, with a precomputed query vector,
  once the namespace's sketch is built (facts/index/sketch.py);
- ``dense_recall``: the share of the exact top 10 that search returns.

Run: ``python bench/recall_turns.py [--backends sqlite,postgres,redis]
[--messages 10000,100000] [--turns 60] [--no-busy] [--reply TEXT]``. Targets (issue #32):
query embed <= 20 ms, turn p50 <= 25 ms at 10k and <= 40 ms at 100k, cold
first turn at 100k <= 1 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from semantic import RECALL_QUERIES, fact_text, open_store, remove_storage

from fastaiagent import Agent, Memory
from fastaiagent.facts.index.sketch import BUILDER
from fastaiagent.kb.embedding import LOCAL_DIMENSION, LocalEmbedder
from fastaiagent.kb.protocols import Chunk
from fastaiagent.testing import CannedLLM

USER = "bench-user"


def embedder_like(count: int) -> Any:
    """``count`` unit vectors with the spectrum of the local embedder's vectors of the bench's texts."""
    import numpy as np

    words = __import__("random").Random(11)
    real = np.array(LocalEmbedder().embed([fact_text(n, words) for n in range(512)]), dtype=np.float64)
    factor = np.linalg.cholesky(np.cov(real.T) + 1e-6 * np.eye(LOCAL_DIMENSION))
    rng = np.random.default_rng(7)
    rows = (rng.standard_normal((count, LOCAL_DIMENSION)) @ factor.T + real.mean(axis=0)).astype("float32")
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def fill(store: Any, messages: int, batch: int = 2_000) -> float:
    """``messages`` recalled messages of :data:`USER`; seconds it took."""
    words = __import__("random").Random(7)
    every = embedder_like(messages)
    index, started, day = store.vector_store(), time.perf_counter(), 1_700_000_000.0
    for first in range(0, messages, batch):
        count = min(batch, messages - first)
        vectors = every[first : first + count]
        index.add([
            Chunk(str(uuid.uuid4()), fact_text(first + n, words).replace("The user's", "My"), vectors[n].tolist(),
                  {"namespace": f"user:{USER}", "role": "user", "created_at": day + (first + n) * 4320.0,
                   "speaker": ("Ana", "Ben")[n % 2]})
            for n in range(count)
        ])  # fmt: skip
    return time.perf_counter() - started


def p50(samples: list[float]) -> float:
    return round(statistics.median(samples), 2)


def measure(backend: str, folder: str, messages: int, turns: int, busy: bool, reply: str = "ok") -> dict[str, Any]:
    """Fill, then time as a fresh process would (new store objects, model loaded by warm())."""
    store = open_store(backend, folder)
    load_s = fill(store, messages)
    store.close()
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        return {"backend": backend, "messages": messages, "load_s": round(load_s, 1),
                **timed_turns(backend, folder, turns, reply)}  # fmt: skip
    finally:
        if neighbour is not None:
            neighbour.kill()


def timed_turns(backend: str, folder: str, turns: int, reply: str = "ok") -> dict[str, Any]:
    embedder = LocalEmbedder()
    started = time.perf_counter()
    memory = Memory(open_store(backend, folder), user_id=USER, recall="auto", embedder=embedder)
    memory.warm()
    warm_s = time.perf_counter() - started
    agent = Agent(name="bench", llm=CannedLLM(reply), system_prompt="Be brief.", memory=memory)
    started = time.perf_counter()
    agent.run(RECALL_QUERIES[0])
    cold_s = time.perf_counter() - started
    timings, embeds = [], []
    for n in range(turns):
        question = f"{RECALL_QUERIES[n % len(RECALL_QUERIES)]} ({n})"  # never a cached query
        started = time.perf_counter()
        agent.run(question)
        timings.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        embedder.embed([f"{question} again"])
        embeds.append((time.perf_counter() - started) * 1000)
    index = memory.location.vector_store()  # type: ignore[attr-defined]
    BUILDER.wait()  # the namespace's sketch, if it gets one
    queries = embedder.embed([f"{RECALL_QUERIES[n % 8]} {n}" for n in range(30)])
    dense = []
    for query in queries:
        started = time.perf_counter()
        index.search(query, 10, namespace=f"user:{USER}")
        dense.append((time.perf_counter() - started) * 1000)
    recall = dense_recall(index, queries)
    memory.location.close()
    timings.sort()
    return {
        "query_embed_p50_ms": p50(embeds), "warm_s": round(warm_s, 2),
        "cold_first_turn_s": round(cold_s, 3), "turn_p50_ms": p50(timings),
        "turn_p99_ms": round(timings[int(len(timings) * 0.99) - 1], 2), "dense_p50_ms": p50(dense),
        "dense_recall": recall,
    }  # fmt: skip


def dense_recall(index: Any, queries: list[list[float]]) -> float:
    """The share of the exact top 10 the index's search order keeps, over ``queries``."""
    import numpy as np

    view = index.copies.held(f"user:{USER}").view()
    found = 0
    for query in queries:
        vector = np.asarray(query, dtype=np.float32)
        exact = {view.keys[i] for i in np.argsort(-(view.vectors @ vector))[:10]}
        found += len(exact & {key for _, key in view.top(vector, 10)})
    return round(found / (10 * len(queries)), 4)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,postgres,redis")
    parser.add_argument("--messages", default="10000,100000")
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--no-busy", action="store_true", help="no CPU-busy neighbour process")
    parser.add_argument("--json", action="store_true", help="one JSON line at the end")
    parser.add_argument("--reply", default="ok", help="the agent's canned reply (a question: see turn_p50_ms)")
    args = parser.parse_args()
    import tempfile

    results = []
    for backend in args.backends.split(","):
        for messages in [int(n) for n in args.messages.split(",")]:
            with tempfile.TemporaryDirectory() as folder:
                try:
                    results.append(measure(backend, folder, messages, args.turns, not args.no_busy, args.reply))
                finally:
                    remove_storage(backend)
            print(json.dumps(results[-1]), flush=True)
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
