"""A long-running process with recall on: does its memory plateau within the budget?

One process, one ``Agent`` and one ``Memory(location=<a SQLite file in a temp
dir>, user_id=<resolver>, recall="auto")``, an instant test LLM, ``--users``
users served round robin, each turn a distinct everyday message. Every
``--every`` turns the process's RSS is sampled (after a ``gc.collect()``);
the samples are printed as they come and, with ``--json``, summed up as one
JSON object on the last line.

``--embedder local`` (default) is the offline MiniLM model on ONNX Runtime (a
few ms a turn); ``--embedder hash`` is a deterministic 384-dimensional hashing
embedder defined here, for fast runs (its vectors mean nothing, but they have
the size, and the process keeps them, as the real ones).

``--diagnose`` also reports, at each sample, the sizes of the library's
in-process caches (users held, namespace matrices and their bytes, ...) and
the Python objects by type (``gc.get_objects()``), and diffs two tracemalloc
snapshots taken at ``--trace-from`` and ``--trace-to`` turns (tracemalloc slows
the run several times: keep the run short).

Run: ``python bench/long_run.py [--turns 250000] [--users 5000] [--every 5000]
[--embedder local|hash] [--diagnose] [--json]``. Target (issue #45): RSS
plateaus within the documented cache budget (docs/production.md).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from _common import rss_mb, rss_parts_mb, write_results

from fastaiagent import Agent, Memory, RunContext
from fastaiagent.testing import CannedLLM

DIMENSION = 384


class HashEmbedder:
    """A deterministic 384-dimensional embedder: each word hashed to a signed
    coordinate, the sum normalised. Fast and offline; not for meaning."""

    dimension = DIMENSION
    identity = "bench-hash@384"

    def embed(self, texts: list[str]) -> list[list[float]]:
        import numpy as np

        rows = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                digest = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
                rows[row, digest % DIMENSION] += 1.0 if digest >> 63 else -1.0
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return (rows / np.where(norms > 0, norms, 1.0)).tolist()


PLACES = ["Lisbon", "Kyoto", "Oaxaca", "Tromso", "Cape Town", "Hanoi", "Porto", "Quebec", "Tbilisi", "Cusco"]
THINGS = ["a road bike", "a sourdough starter", "a standing desk", "noise-cancelling headphones",
          "a rescue greyhound", "a Japanese chef's knife", "a secondhand piano", "an e-reader",
          "a tent for two", "a cast-iron pan"]  # fmt: skip
PEOPLE = ["my sister Ana", "my colleague Ben", "my landlord", "my daughter", "our neighbour Li",
          "my manager Rosa", "my cousin Omar", "the dentist", "my running club", "my book club"]  # fmt: skip
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "the weekend", "next month"]
TEMPLATES = [
    "I'm thinking about a trip to {place} around {day}; what should I pack besides {thing}?",
    "Remind me that {person} is coming over on {day} and is vegetarian.",
    "I finally bought {thing} after comparing prices for {n} weeks.",
    "Can you help me write a short note to {person} about {day}?",
    "My budget for {thing} is about {n}0 euros, is that realistic?",
    "{person} recommended {place} for a holiday, have we talked about it before?",
    "I need to cancel the appointment with {person} on {day}, it clashes with work.",
    "What did I say last time about {thing}? I can't remember the details.",
    "I've been training {n} times a week and want to plan a race in {place}.",
    "Please note that I moved the meeting with {person} to {day} at {n} pm.",
]


def message(user: int, turn: int) -> str:
    """A distinct everyday message: the same (user, turn) always says the same."""
    pick = random.Random(user * 1_000_003 + turn)
    said = pick.choice(TEMPLATES).format(
        place=pick.choice(PLACES), thing=pick.choice(THINGS), person=pick.choice(PEOPLE),
        day=pick.choice(DAYS), n=pick.randint(2, 9),
    )  # fmt: skip
    return f"{said} (note {turn})"


def library_caches(memory: Memory) -> dict[str, Any]:
    """What the library holds in this process, by cache (see docs/production.md)."""
    from fastaiagent.agent.memory_blocks import message_ids
    from fastaiagent.facts import fact

    try:  # the process's shared budget (issue #45); before it, each index's own cache
        from fastaiagent.facts.index.matrix import shared_held

        matrices, matrix_bytes = shared_held()
    except ImportError:
        cache = memory.location.vector_store().copies.cache  # type: ignore[attr-defined]
        matrices, matrix_bytes = len(cache), cache.held
    try:  # entity books bounded by bytes (issue #45); before, by users only
        from fastaiagent.facts.entities import cached_books

        entity_books, book_bytes = cached_books(memory.location)
    except ImportError:
        entity_books, book_bytes = -1, 0
    window_messages = sum(
        len(memory._users.get(user).memory.primary.get_messages()) for user in memory.cached_users[-50:]
    )
    return {
        "users_held": len(memory.cached_users),
        "window_messages_last_50_users": window_messages,
        "namespace_matrices": matrices,
        "namespace_matrix_mb": round(matrix_bytes / 2**20, 1),
        "entity_books": entity_books,
        "entity_book_mb": round(book_bytes / 2**20, 1),
        "message_ids": len(message_ids._issued),
        "parsed_metadata": len(fact._PARSED),
    }


def object_counts(top: int = 12) -> dict[str, int]:
    counts = Counter(type(obj).__name__ for obj in gc.get_objects())
    return dict(counts.most_common(top))


def measured(turns: int, seconds: float) -> dict[str, Any]:
    parts = rss_parts_mb()
    try:  # heap given back after evictions (issue #45); before, never
        from fastaiagent._heap import trim_seconds, trims
    except ImportError:
        trims, trim_seconds = (lambda: 0), (lambda: 0.0)
    return {"turns": turns, "rss_mb": round(rss_mb(), 1), "anon_mb": round(parts.get("anon", 0.0), 1),
            "file_mb": round(parts.get("file", 0.0), 1), "s": round(seconds, 1), "trims": trims(),
            "trim_s": round(trim_seconds(), 2)}  # fmt: skip


def line(sample: dict[str, Any]) -> str:
    caches = f"  {json.dumps(sample['caches'])}" if "caches" in sample else ""
    return (f"turns {sample['turns']:>8}  rss {sample['rss_mb']:7.1f} MB (anon {sample['anon_mb']:7.1f}, "
            f"file {sample['file_mb']:7.1f})  {sample['s']:8.1f} s  trims {sample['trims']} ({sample['trim_s']} s){caches}")  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    import tracemalloc

    from fastaiagent.kb.embedding import LocalEmbedder

    embedder: Any = HashEmbedder() if args.embedder == "hash" else LocalEmbedder()
    folder = tempfile.mkdtemp(prefix="long-run-")
    memory = Memory(
        location=f"sqlite:///{folder}/memory.db",
        user_id=lambda ctx: ctx.state["user_id"],
        recall="auto",
        embedder=embedder,
        **({"max_users": args.max_users} if args.max_users else {}),
    )
    llm = CannedLLM("Noted. I'll keep that in mind the next time it comes up.")
    agent = Agent(name="long-run", llm=llm, system_prompt="Be brief.", memory=memory)
    contexts = [RunContext(state={"user_id": f"user-{u}"}) for u in range(args.users)]
    memory.warm()
    gc.collect()
    samples: list[dict[str, Any]] = [measured(0, 0.0)]
    print(line(samples[0]), flush=True)
    snapshots: dict[int, Any] = {}
    if args.diagnose:
        tracemalloc.start(12)
    started, cpu = time.perf_counter(), time.process_time()
    for turn in range(1, args.turns + 1):
        user = (turn - 1) % args.users
        agent.run(message(user, (turn - 1) // args.users), context=contexts[user])
        # The test LLM records every call's messages; a real model client keeps none.
        llm.calls.clear()
        llm.tools_offered.clear()
        if args.diagnose and turn in (args.trace_from, args.trace_to):
            gc.collect()
            snapshots[turn] = tracemalloc.take_snapshot()
        if turn % args.every == 0:
            gc.collect()
            sample = measured(turn, time.perf_counter() - started)
            if args.diagnose:
                sample["caches"] = library_caches(memory)
                sample["objects"] = object_counts()
            samples.append(sample)
            print(line(sample), flush=True)
    if args.diagnose and len(snapshots) == 2:
        first, last = snapshots[args.trace_from], snapshots[args.trace_to]
        print(f"-- tracemalloc: what grew from {args.trace_from} to {args.trace_to} turns", flush=True)
        for stat in last.compare_to(first, "traceback")[:15]:
            print(f"{stat.size_diff / 2**20:+8.2f} MB {stat.count_diff:+9d} blocks", flush=True)
            for frame in stat.traceback.format()[-8:]:
                print("    " + frame, flush=True)
    held = {"turns": args.turns, "users": args.users, "embedder": args.embedder, "samples": samples}
    by_turns = {s["turns"]: s for s in samples}
    marks = [t for t in (5_000, 10_000, 50_000, 100_000, 250_000) if t in by_turns]
    held["rss_mb_at"] = {t: by_turns[t]["rss_mb"] for t in marks}
    held["anon_mb_at"] = {t: by_turns[t]["anon_mb"] for t in marks}
    held["turns_per_s"] = round(args.turns / (time.perf_counter() - started), 1)
    held["cpu_ms_per_turn"] = round((time.process_time() - cpu) * 1000 / args.turns, 3)
    return held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=250_000)
    parser.add_argument("--users", type=int, default=5_000)
    parser.add_argument("--every", type=int, default=5_000, help="sample RSS every N turns")
    parser.add_argument("--embedder", choices=("local", "hash"), default="local")
    parser.add_argument("--max-users", type=int, default=None, help="Memory(max_users=...); default the library's")
    parser.add_argument("--diagnose", action="store_true", help="cache sizes, object counts, tracemalloc diff")
    parser.add_argument("--trace-from", type=int, default=20_000)
    parser.add_argument("--trace-to", type=int, default=60_000)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on the last line")
    args = parser.parse_args()
    results = run(args)
    write_results("long_run", results)
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
