"""Evidence recall of the recall layer (VectorBlock) on LoCoMo.

Each conversation's turns are fed through VectorBlock as one user's messages;
then every category 1-4 question is asked through ``VectorBlock.recall`` and
we measure recall@k = the share of a question's evidence turns among the
first k distinct turns returned. Reported for the default retrieval and for
BM25-only and dense-only through the same harness.

    python bench/locomo_recall.py [--data PATH] [--modes default,bm25,dense]

The data is read in place (CC BY-NC 4.0; never copy it into the repository).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from fastaiagent.agent.memory_blocks.vector import VectorBlock
from fastaiagent.kb.backends.faiss import FaissVectorStore
from fastaiagent.kb.embedding import get_embedder
from fastaiagent.kb.protocols import Chunk
from fastaiagent.llm.message import Message, UserMessage

DEFAULT_DATA = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"
)
KS = (1, 5, 10)
CATEGORIES = (1, 2, 3, 4)
BLOCK_OPTIONS: dict[str, Any] = {}  # experiment overrides of VectorBlock options
PG_TABLE = "locomo_bench"  # a Postgres location gets a fact table of its own
_SESSION = re.compile(r"^session_(\d+)$")


class CachingEmbedder:
    """Memoises vectors so several retrieval modes share one embedding pass."""

    def __init__(self, inner: Any, path: Path | None = None) -> None:
        self.inner = inner
        self.dimension = inner.dimension
        self.path = path
        self.cache: dict[str, list[float]] = {}
        if path is not None and path.exists():
            self.cache = json.loads(path.read_text(encoding="utf-8"))

    def save(self) -> None:
        if self.path is not None:
            self.path.write_text(json.dumps(self.cache), encoding="utf-8")

    def embed(self, texts: list[str]) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if missing:
            self.cache.update(zip(missing, self.inner.embed(missing), strict=True))
        return [self.cache[t] for t in texts]


class TurnTaggedBlock(VectorBlock):
    """VectorBlock that remembers which LoCoMo turn each chunk came from."""

    def _make_chunk(self, message: Message) -> Chunk | None:
        chunk = super()._make_chunk(message)
        if chunk is not None:
            chunk.metadata["turn"] = message.name
        return chunk


def turns_of(conversation: dict[str, Any]) -> list[dict[str, Any]]:
    """Every turn in session order, each with its session date."""
    sessions = sorted((int(m.group(1)), key) for key in conversation if (m := _SESSION.match(key)))
    out = []
    for number, key in sessions:
        date = conversation.get(f"{key}_date_time", "")
        for turn in conversation[key]:
            out.append({**turn, "date": date, "session": number})
    return out


def message_text(turn: dict[str, Any]) -> str:
    """What the user "said": speaker-labelled text, with any shared photo described."""
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [shares a photo: {turn['blip_caption']}]"
    return text


def evidence_ids(raw: list[str], known: set[str]) -> list[str]:
    """Clean evidence ids: split malformed entries, drop ids that do not resolve."""
    ids: list[str] = []
    for entry in raw:
        for part in re.split(r"[;\s]+", entry):
            part = part.strip()
            if part in known and part not in ids:
                ids.append(part)
    return ids


def returned_turns(block: VectorBlock, question: str, k: int) -> list[str]:
    turns: list[str] = []
    for item in block.recall(question):
        turn = item.chunk.metadata.get("turn")
        if turn and turn not in turns:
            turns.append(turn)
    return turns[:k]


def recall_store(location: str | None, embedder: Any) -> Any:
    """The in-process FAISS store (the spec's default), or the durable index that
    the fact store at ``location`` offers (``vector_store()``, what
    ``Memory(recall="auto")`` uses on that location)."""
    if location is None:
        return FaissVectorStore(dimension=embedder.dimension)
    if location.startswith(("postgres://", "postgresql://")):
        from fastaiagent.facts.postgres import PostgresFactStore

        return PostgresFactStore(location, table=PG_TABLE).vector_store()
    from fastaiagent.facts import make_fact_store

    return make_fact_store(location).vector_store()


def evaluate(
    samples: list[dict[str, Any]], embedder: Any, retrieval: str, location: str | None = None
) -> dict[str, Any]:
    sums: dict[Any, dict[int, float]] = defaultdict(lambda: dict.fromkeys(KS, 0.0))
    counts: dict[Any, int] = defaultdict(int)
    for number, sample in enumerate(samples):
        turns = turns_of(sample["conversation"])
        block = TurnTaggedBlock(
            recall_store(location, embedder),
            namespace=f"locomo:{retrieval}:{number}",
            embedder=embedder,
            top_k=max(KS),
            retrieval=retrieval,
            min_content_chars=1,
            batch_size=256,
            **BLOCK_OPTIONS,
        )
        block.clear()  # a reused location holds the last run's turns under the same namespace
        for turn in turns:
            block.on_message(UserMessage(message_text(turn), name=turn["dia_id"]))
        known = {t["dia_id"] for t in turns}
        for qa in sample["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            evidence = evidence_ids(qa.get("evidence") or [], known)
            if not evidence:
                continue
            got = returned_turns(block, qa["question"], max(KS))
            for key in (qa["category"], "overall"):
                counts[key] += 1
                for k in KS:
                    sums[key][k] += len(set(got[:k]) & set(evidence)) / len(evidence)
    return {
        str(key): {
            "n": counts[key],
            **{f"recall@{k}": round(sums[key][k] / counts[key], 4) for k in KS},
        }
        for key in [*CATEGORIES, "overall"]
        if counts[key]
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--modes", default="default,bm25,dense")
    parser.add_argument(
        "--cache", type=Path, default=None, help="keep vectors in this file (outside the repo)"
    )
    parser.add_argument("--dense-weight", type=float, default=None)
    parser.add_argument(
        "--location",
        default=None,
        help="run through the durable index of this fact store (e.g. sqlite:///tmp/locomo.db)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "locomo_recall.json"
    )
    args = parser.parse_args(argv)
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    embedder = CachingEmbedder(get_embedder("auto"), args.cache)
    if args.dense_weight is not None:
        BLOCK_OPTIONS["dense_weight"] = args.dense_weight
    modes = {"default": "hybrid", "bm25": "bm25", "dense": "dense"}
    results: dict[str, Any] = {}
    for label in args.modes.split(","):
        started = time.perf_counter()
        results[label] = evaluate(samples, embedder, modes[label], args.location)
        embedder.save()
        elapsed = time.perf_counter() - started
        print(f"\n{label} (retrieval={modes[label]!r}, {elapsed:.1f} s)")
        print(f"{'category':>10} {'n':>5} " + " ".join(f"{'R@' + str(k):>7}" for k in KS))
        for key, row in results[label].items():
            print(f"{key:>10} {row['n']:>5} " + " ".join(f"{row[f'recall@{k}']:>7.3f}" for k in KS))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"data": str(args.data), "results": results}, indent=2))
    summary = {
        label: {k: res["overall"][k] for k in ("recall@5", "recall@10")}
        for label, res in results.items()
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
