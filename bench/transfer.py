"""Moving memory: ``fastaiagent memory copy`` of a big SQLite location to Postgres
and to Redis, and ``export`` of it to a file.

The source holds ``--facts`` facts (over ``--fact-users`` users, one in ten a
replaced version, so history travels too) and ``--messages`` recalled messages
(over ``--recall-users`` users, 384-dimensional vectors of a seeded
random-direction-per-word embedder). Each copy runs in a process of its own (the CLI's path), timed with
its peak anonymous memory (heap; the SQLite file is memory-mapped, so the
process's RSS also counts the file pages it read). Then, per target:

- nothing lost: facts per subject (history included) and messages per
  namespace equal the source's, and a random sample of 500 facts and 500
  messages is compared field by field (vectors bit for bit);
- zero texts re-embedded: the copy has no embedder at all, and the recall
  check below counts its embedder's calls (the queries only);
- the same recall: ``VectorBlock.recall`` (dense + keywords, the default
  options) of ``--queries`` queries returns the same top 5 ids in the
  target as in the source.

    python bench/transfer.py                      # 100k facts, 100k messages
    python bench/transfer.py --facts 10000 --messages 10000 --targets redis

Results go to bench/results/transfer.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from _common import write_results

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/0"
DIMENSION = 384
_SYLLABLES = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "da", "zu", "fe", "ni", "ho", "ba"]
WORDS = sorted({a + b + c for a in _SYLLABLES for b in _SYLLABLES for c in _SYLLABLES})[:3000]
"""A vocabulary of ordinary size, drawn with Zipf-like weights as words are: a
query's words are then about as rare as in real chats (a 60-word vocabulary
made every word common and every score a tie)."""
_WEIGHTS = [1.0 / (rank + 10) for rank in range(len(WORDS))]


class HashEmbedder:
    """Each word a fixed random direction (seeded by its hash), a text the unit sum
    of its words': dense like a real model's vectors, so scores do not tie (a
    bag-of-buckets embedder tied often, and tied hits come back in each store's
    own order). Counts the texts it embeds."""

    dimension = DIMENSION
    model = "bench-hash"

    def __init__(self) -> None:
        self.texts = 0
        self._words: dict[str, Any] = {}

    def _word(self, word: str) -> Any:
        if word not in self._words:
            seed = int(hashlib.md5(word.encode()).hexdigest()[:8], 16)
            self._words[word] = np.random.default_rng(seed).standard_normal(DIMENSION)
        return self._words[word]

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts += len(texts)
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row] += self._word(word)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)
        return out.tolist()


def sentence(rng: random.Random, n: int = 9) -> str:
    return " ".join(rng.choices(WORDS, _WEIGHTS, k=n))


def build_source(location: str, facts: int, fact_users: int, messages: int, recall_users: int) -> None:
    from fastaiagent.facts import Fact
    from fastaiagent.facts.factory import make_fact_store
    from fastaiagent.kb.protocols import Chunk

    rng = random.Random(7)
    store = make_fact_store(location)
    start = time.perf_counter()
    per_user = facts // fact_users if facts else 0
    at = 1_700_000_000.0
    for user in range(fact_users if facts else 0):
        previous = None
        for n in range(per_user):
            at += 1.0
            fact = Fact(f"{sentence(rng)} #{n}", scope="user", scope_id=f"u{user}", created_at=at)
            if previous is not None and n % 10 == 9:  # a new version of the previous fact
                previous = store.update(fact, previous)
            else:
                previous = store.add(fact)
    print(f"  {facts:,} facts written in {time.perf_counter() - start:.1f} s", flush=True)
    start, embedder = time.perf_counter(), HashEmbedder()
    rng, at = random.Random(8), 1_800_000_000.0  # the messages alone decide what they are
    vectors, per_user = store.vector_store(), messages // recall_users
    for user in range(recall_users):
        namespace = f"user:r{user}"
        for first in range(0, per_user, 1000):
            texts = [f"{sentence(rng, 14)} m{first + k}" for k in range(min(1000, per_user - first))]
            meta = {"namespace": namespace, "role": "user", "embedder": "bench-hash@384"}
            chunks = [
                Chunk(f"h-{user}-{first + k}", text, vector, {**meta, "created_at": at + first + k})
                for k, (text, vector) in enumerate(zip(texts, embedder.embed(texts), strict=True))
            ]
            vectors.add(chunks)
    print(f"  {messages:,} messages written in {time.perf_counter() - start:.1f} s", flush=True)
    store.close()


def timed(*command: str) -> dict[str, Any]:
    """Run ``command`` (a copy or export in this script's child mode); its report."""
    done = subprocess.run([sys.executable, __file__, *command], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def anon_mb() -> float:
    """This process's anonymous resident memory (heap, not the SQLite file's mmap)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return 0.0


def child(mode: str, source: str, target: str) -> None:
    from fastaiagent.facts.transfer import copy_memory, export_memory

    peak, done = [anon_mb()], threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak.append(max(peak[-1], anon_mb()))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    counts = copy_memory(source, target) if mode == "copy" else export_memory(source, target)
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": round(seconds, 1), "peak_anon_mb": round(max(peak)),
                      "peak_rss_mb_with_mmap": round(rss), **counts.as_dict(),
                      "kept": counts.kept, "skipped": counts.skipped}))  # fmt: skip


def compare(
    source_location: str, target_location: str, native_location: str | None, queries: int
) -> dict[str, Any]:
    from fastaiagent.agent.memory_blocks.vector import VectorBlock
    from fastaiagent.facts.factory import make_fact_store

    source, target = make_fact_store(source_location), make_fact_store(target_location)
    subjects = {(s.scope, s.scope_id, s.project_id): s.count for s in source.subjects(include_superseded=True)}
    copied = {(s.scope, s.scope_id, s.project_id): s.count for s in target.subjects(include_superseded=True)}
    sv, tv = source.vector_store(), target.vector_store()
    namespaces = sv.namespace_names()
    rng = random.Random(11)
    sample = rng.sample(sorted(subjects), min(500, len(subjects)))
    facts_same = facts_seen = 0
    for scope, scope_id, project in sample:
        pair = [
            store.browse(scope=scope, scope_id=scope_id, project_id=project, include_superseded=True, limit=1000)
            for store in (source, target)
        ]
        for want, got in zip(*pair, strict=True):
            facts_seen += 1
            facts_same += (want.fact, want.created_at, want.active, want.superseded_at, want.metadata) == (
                got.fact, got.created_at, got.active, got.superseded_at, got.metadata)  # fmt: skip
    chunks_same = chunks_seen = 0
    for namespace in namespaces:  # every message, field by field
        copies = {c.id: c for page in tv.vector_pages(namespace, 1000) for c in page}
        for page in sv.vector_pages(namespace, 1000):
            for want in page:
                got = copies.get(want.id)
                chunks_seen += 1
                chunks_same += got is not None and (got.text, got.metadata, got.vector) == (
                    want.text, want.metadata, want.vector)  # fmt: skip
    embedder, same = HashEmbedder(), {"recall": 0, "dense": 0, "native": 0}
    native = make_fact_store(native_location).vector_store() if native_location else None
    for n in range(queries):
        namespace = namespaces[n % len(namespaces)]
        query = sentence(rng, 4)
        recalled = [
            [r.chunk.id for r in VectorBlock(v, embedder, namespace=namespace, top_k=5).recall(query)]
            for v in (sv, tv, native) if v is not None
        ]  # fmt: skip
        same["recall"] += recalled[0] == recalled[1] and len(recalled[0]) == 5
        same["native"] += native is not None and recalled[1] == recalled[2]
        vector = embedder.embed([query])[0]
        dense = [[h.chunk.id for h in v.search(vector, 5, namespace=namespace)] for v in (sv, tv)]
        same["dense"] += dense[0] == dense[1]
    return {
        "subjects_equal": subjects == copied,
        "messages_equal": all(sv.count(ns) == tv.count(ns) for ns in namespaces),
        "facts_of_500_subjects_equal": f"{facts_same}/{facts_seen}",
        "messages_equal_field_by_field": f"{chunks_same}/{chunks_seen}",
        "recall_same_top5_as_source": f"{same['recall']}/{queries}",
        "dense_same_top5_as_source": f"{same['dense']}/{queries}",
        "recall_same_top5_as_written_there": f"{same['native']}/{queries}" if native else "-",
        "texts_embedded_by_the_checks": embedder.texts,
    }


def cleanup(target: str, name: str) -> None:
    if target == "postgres":
        import psycopg

        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            for (table,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND starts_with(tablename, %s)",
                (name,),
            ).fetchall():
                conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')
    else:
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(match=name + "*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(*sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--facts", type=int, default=100_000)
    parser.add_argument("--fact-users", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--recall-users", type=int, default=100)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--targets", default="postgres,redis")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-transfer-"))
    source = f"sqlite:///{folder / 'source.db'}"
    print(f"building the source ({folder})", flush=True)
    build_source(source, args.facts, args.fact_users, args.messages, args.recall_users)
    results: dict[str, Any] = {"facts": args.facts, "messages": args.messages}
    export = timed("--child", "export", source, str(folder / "memory.jsonl"))
    export["file_mb"] = round((folder / "memory.jsonl").stat().st_size / 2**20)
    results["export"] = export
    print("export:", export, flush=True)
    for target in args.targets.split(","):
        names = [f"bench_transfer_{uuid.uuid4().hex[:8]}" for _ in range(2)]
        copy, native = (
            f"{POSTGRES_URL}?table={name}" if target == "postgres" else f"{REDIS_URL}?prefix={name}"
            for name in names
        )
        try:
            report = timed("--child", "copy", source, copy)
            # The same messages written there directly: recall's baseline on that backend.
            build_source(native, 0, 1, args.messages, args.recall_users)
            report.update(compare(source, copy, native, args.queries))
            results[f"copy_to_{target}"] = report
            print(f"copy to {target}:", report, flush=True)
        finally:
            for name in names:
                cleanup(target, name)
    print("results:", write_results("transfer", results))


if __name__ == "__main__":
    main()
