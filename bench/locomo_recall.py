"""Evidence recall of the recall layer (VectorBlock) on LoCoMo.

Each conversation's turns are fed through VectorBlock as one user's messages;
then every category 1-4 question is asked through ``VectorBlock.recall`` and
we measure recall@k = the share of a question's evidence turns among the
first k distinct turns returned (turn-level), and the share of its evidence
sessions among the sessions of those turns (session-level, S@k, the figure
other memory projects publish). T<B> is turn-level recall at equal prompt
tokens: what of the 10 recalled turns fits in B tokens, packed as
``Memory(max_memory_tokens=B)`` packs them. Reported for the default retrieval and for
BM25-only and dense-only through the same harness, for the whole split and
for each half: options are chosen on conversations 0-2 and confirmed on 3-4.
Each table ends with the halves' gap over every 3 + 2 split of the
conversations, the spread a fixed method shows from the conversations alone.
With BM25 run too, each other mode's gap is also given minus BM25's, the same
questions resampled for both: what a method adds to the gap beyond the
conversations' own difficulty.

    python bench/locomo_recall.py [--data PATH] [--modes default,bm25,dense]

The data is read in place (CC BY-NC 4.0; never copy it into the repository).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import random
import re
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fastaiagent.agent.memory_blocks.vector import Recalled, VectorBlock
from fastaiagent.agent.memory_budget import pack
from fastaiagent.kb.backends.faiss import FaissVectorStore
from fastaiagent.kb.embedding import get_embedder
from fastaiagent.kb.protocols import Chunk
from fastaiagent.llm.message import Message, SystemMessage, UserMessage
from fastaiagent.recall.weights import SIGNALS, Ranking

DEFAULT_DATA = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"
)
KS = (1, 5, 10)
TOKEN_BUDGETS = (100, 200, 400)  # tokens of recalled messages in the prompt
CATEGORIES = (1, 2, 3, 4)
BLOCK_OPTIONS: dict[str, Any] = {}  # experiment overrides of VectorBlock options
STEPS: dict[str, Any] = {}  # experiment overrides of ranking weights (recall.weights.Ranking)
RANKING_WEIGHTS = {f.name for f in dataclasses.fields(Ranking)}
PG_TABLE = "locomo_bench"  # a Postgres location gets a fact table of its own
REDIS_PREFIX = "locomo_bench"  # and a Redis one a key prefix of its own
_SESSION = re.compile(r"^session_(\d+)$")


class CachingEmbedder:
    """Memoises vectors so several retrieval modes share one embedding pass."""

    def __init__(self, inner: Any, path: Path | None = None) -> None:
        self.inner = inner
        self.dimension = inner.dimension
        self.understands_cjk = getattr(inner, "understands_cjk", True)
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

    turn: str | None = None  # the id of the turn being fed

    def make_chunk(self, message: Message) -> Chunk | None:
        chunk = super().make_chunk(message)
        if chunk is not None:
            chunk.metadata["turn"] = self.turn
        return chunk


def session_time(date: str) -> float | None:
    """LoCoMo's ``"1:56 pm on 8 May, 2023"`` as epoch seconds (UTC), None if unreadable."""
    try:
        moment = datetime.strptime(date.strip(), "%I:%M %p on %d %B, %Y")
    except ValueError:
        return None
    return moment.replace(tzinfo=timezone.utc).timestamp()


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


def turns_in(items: list[Recalled]) -> list[str]:
    turns: list[str] = []
    for item in items:
        turn = item.chunk.metadata.get("turn")
        if turn and turn not in turns:
            turns.append(turn)
    return turns


def within_budgets(block: VectorBlock, items: list[Recalled]) -> dict[int, list[str]]:
    """The turns whose notes ``Memory(max_memory_tokens=B)`` would keep, per budget B:
    the recalled section packed as the memory packs it."""
    if not items:
        return {budget: [] for budget in TOKEN_BUDGETS}
    rendered = [("vector", [SystemMessage(block.format(items))])]
    lines = [block.format([item]).split("\n")[-1] for item in items]
    out = {}
    for budget in TOKEN_BUDGETS:
        packed = pack(rendered, budget)
        kept = set((packed.messages[0].content or "").split("\n")) if packed.messages else set()
        out[budget] = turns_in([item for item, line in zip(items, lines, strict=True) if line in kept])
    return out


def recall_store(location: str | None, embedder: Any) -> Any:
    """The in-process FAISS store (the spec's default), or the durable index that
    the fact store at ``location`` offers (``vector_store()``, what
    ``Memory(recall="auto")`` uses on that location)."""
    if location is None:
        return FaissVectorStore(dimension=embedder.dimension)
    if location.startswith(("postgres://", "postgresql://")):
        from fastaiagent.facts.postgres.store import PostgresFactStore

        return PostgresFactStore(location, table=PG_TABLE).vector_store()
    if location.startswith(("redis://", "rediss://")):
        from fastaiagent.facts.redis.store import RedisFactStore

        return RedisFactStore(location, prefix=REDIS_PREFIX).vector_store()
    from fastaiagent.facts import make_fact_store

    return make_fact_store(location).vector_store()


HALVES = {"tuned (0-2)": (0, 1, 2), "confirmed (3-4)": (3, 4)}


class Tally:
    """Running sums of turn-level and session-level recall@k per category."""

    def __init__(self) -> None:
        self.sums: dict[Any, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.counts: dict[Any, int] = defaultdict(int)
        self.questions: list[tuple[float, float]] = []  # each question's R@5, R@10

    def add(
        self, category: int, got: list[str], evidence: list[str], within: dict[int, list[str]]
    ) -> None:
        wanted_sessions = {session_of(e) for e in evidence}
        found = set(evidence)
        self.questions.append((len(set(got[:5]) & found) / len(found), len(set(got[:10]) & found) / len(found)))
        for key in (category, "overall"):
            self.counts[key] += 1
            for budget, turns in within.items():
                self.sums[key][f"recall@{budget}tokens"] += len(set(turns) & set(evidence)) / len(
                    evidence
                )
            for k in KS:
                self.sums[key][f"recall@{k}"] += len(set(got[:k]) & set(evidence)) / len(evidence)
                sessions = {session_of(t) for t in got[:k]}
                self.sums[key][f"session_recall@{k}"] += len(sessions & wanted_sessions) / len(
                    wanted_sessions
                )

    def table(self) -> dict[str, Any]:
        return {
            str(key): {
                "n": self.counts[key],
                **{name: round(v / self.counts[key], 4) for name, v in self.sums[key].items()},
            }
            for key in [*CATEGORIES, "overall"]
            if self.counts[key]
        }


def gap_interval(
    tuned: Tally,
    confirmed: Tally,
    rounds: int = 2000,
    seed: int = 0,
    baseline: tuple[Tally, Tally] | None = None,
) -> dict[str, list[float]]:
    """The 95% interval of the halves' gap (points) at R@5 and R@10, by resampling
    each half's questions with replacement: how far the gap itself is measured.

    With ``baseline`` (the same questions' tallies of another method, e.g. BM25),
    the interval of this method's gap minus the baseline's, resampling the same
    questions for both: whether the method widens the gap beyond what the
    conversations' own difficulty gives a method that nothing tunes."""
    rng = random.Random(seed)

    def mean(questions: list[tuple[float, float]], picks: list[int], i: int) -> float:
        return sum(questions[p][i] for p in picks) / len(picks)

    gaps: list[list[float]] = [[], []]
    for _ in range(rounds):
        first = rng.choices(range(len(tuned.questions)), k=len(tuned.questions))
        second = rng.choices(range(len(confirmed.questions)), k=len(confirmed.questions))
        for i in (0, 1):
            gap = mean(tuned.questions, first, i) - mean(confirmed.questions, second, i)
            if baseline is not None:
                gap -= mean(baseline[0].questions, first, i) - mean(baseline[1].questions, second, i)
            gaps[i].append(100 * gap)
    low, high = int(0.025 * rounds), int(0.975 * rounds) - 1
    return {
        f"R@{k}": [round(sorted(gaps[i])[low], 1), round(sorted(gaps[i])[high], 1)]
        for i, k in enumerate((5, 10))
    }


def session_of(turn_id: str) -> str:
    """``D3`` for turn ``D3:7``: the session a turn belongs to."""
    return turn_id.split(":", 1)[0]


SPEAKER_NAMES = True  # --anonymous: messages without Message.name (no participant cues)


def feed(block: TurnTaggedBlock, turns: list[dict[str, Any]]) -> None:
    """Each turn as a user message named after its speaker, said at its session's date."""
    for turn in turns:
        block.turn = turn["dia_id"]
        name = turn["speaker"] if SPEAKER_NAMES else None
        message = UserMessage(message_text(turn), name=name)
        block.on_message(message, at=session_time(turn["date"]))
    block.flush()


def evaluate(
    samples: list[dict[str, Any]], embedder: Any, retrieval: str, location: str | None = None
) -> tuple[dict[str, Any], tuple[Tally, Tally]]:
    """Recall tables overall, for each half of the split (see :data:`HALVES`) and per
    conversation, and the two halves' tallies (for :func:`gap_interval`)."""
    tallies = {"overall": Tally(), **{name: Tally() for name in HALVES}}
    tallies.update({f"conversation {n}": Tally() for n in range(len(samples))})
    store = recall_store(location, embedder)
    for number, sample in enumerate(samples):
        turns = turns_of(sample["conversation"])
        block = TurnTaggedBlock(
            store,
            # A user's namespace on a durable location: the entity side keeps a book per user.
            namespace=f"locomo:{retrieval}:{number}" if location is None else f"user:locomo-{retrieval}-{number}",
            embedder=embedder,
            top_k=max(KS),
            retrieval=retrieval,
            min_content_chars=1,
            batch_size=256,
            **BLOCK_OPTIONS,
        )
        block.ranking = block.ranking.with_(**STEPS)
        block.clear()  # a durable store keeps the previous run's chunks
        feed(block, turns)
        known = {t["dia_id"] for t in turns}
        halves = [name for name, members in HALVES.items() if number in members]
        halves.append(f"conversation {number}")
        for qa in sample["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            evidence = evidence_ids(qa.get("evidence") or [], known)
            if not evidence:
                continue
            items = block.recall(qa["question"])
            got, within = turns_in(items)[: max(KS)], within_budgets(block, items)
            for name in ["overall", *halves]:
                tallies[name].add(qa["category"], got, evidence, within)
    tuned, confirmed = (tallies[name] for name in HALVES)
    return {name: tally.table() for name, tally in tallies.items()}, (tuned, confirmed)


def print_tables(label: str, retrieval: str, result: dict[str, Any], elapsed: float) -> None:
    print(f"\n{label} (retrieval={retrieval!r}, {elapsed:.1f} s)")
    heads = [f"R@{k}" for k in KS] + [f"S@{k}" for k in KS] + [f"T{b}" for b in TOKEN_BUDGETS]
    print(f"{'':>16} {'category':>8} {'n':>5} " + " ".join(f"{h:>6}" for h in heads))
    for part, table in result.items():
        for key, row in table.items():
            if part != "overall" and key != "overall":
                continue  # per category for the whole split only
            values = [row[f"recall@{k}"] for k in KS] + [row[f"session_recall@{k}"] for k in KS]
            values += [row[f"recall@{b}tokens"] for b in TOKEN_BUDGETS]
            print(f"{part:>16} {key:>8} {row['n']:>5} " + " ".join(f"{v:>6.3f}" for v in values))
    print(split_gaps(result))


def split_gaps(result: dict[str, Any]) -> str:
    """How far apart the halves are over every way of splitting the conversations
    as :data:`HALVES` does (3 + 2 of 5): for a fixed method the gap is the
    conversations' spread, which the tuning-on / confirming-on split is one draw of."""
    rows = {
        int(part.rsplit(" ", 1)[1]): table["overall"]
        for part, table in result.items()
        if part.startswith("conversation ")
    }
    size = len(HALVES["tuned (0-2)"])
    if len(rows) <= size:
        return "split gaps: too few conversations"

    def recall(members: Sequence[int], k: int) -> float:
        n = sum(rows[m]["n"] for m in members)
        return sum(rows[m][f"recall@{k}"] * rows[m]["n"] for m in members) / n

    def gap(first: Sequence[int]) -> tuple[float, float]:
        rest = [m for m in rows if m not in first]
        return (
            100 * (recall(first, 5) - recall(rest, 5)),
            100 * (recall(first, 10) - recall(rest, 10)),
        )

    gaps = [gap(first) for first in itertools.combinations(sorted(rows), size)]
    chosen = gap(HALVES["tuned (0-2)"])
    within = sum(1 for pair in gaps if max(abs(g) for g in pair) <= 3)
    spread = ", ".join(
        f"R@{k} {min(g[i] for g in gaps):+.1f} to {max(g[i] for g in gaps):+.1f}"
        for i, k in enumerate((5, 10))
    )
    return (
        f"halves' gap (points) over the {len(gaps)} splits {size} + {len(rows) - size}: {spread}; "
        f"within 3 at both depths on {within}; the tuned / confirmed split: "
        f"{chosen[0]:+.1f} / {chosen[1]:+.1f}"
    )


def _points(interval: dict[str, list[float]]) -> str:
    return ", ".join(f"{k} {low:+.1f} to {high:+.1f}" for k, (low, high) in interval.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--modes", default="default,bm25,dense")
    parser.add_argument(
        "--cache", type=Path, default=None, help="keep vectors in this file (outside the repo)"
    )
    parser.add_argument("--dense-weight", type=float, default=None)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="OPTION=VALUE",
        help="a VectorBlock option or a ranking weight (recall.weights.Ranking) for an ablation, "
        "e.g. --set cues=false, --set participant=0, --set follow_turns=0 or --set signal.speaker=0",
    )
    parser.add_argument(
        "--location",
        default=None,
        help="run through the durable index of this fact store (e.g. sqlite:///tmp/locomo.db)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "locomo_recall.json"
    )
    parser.add_argument(
        "--anonymous", action="store_true", help="feed messages without speaker names"
    )
    args = parser.parse_args(argv)
    global SPEAKER_NAMES
    SPEAKER_NAMES = not args.anonymous
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    embedder = CachingEmbedder(get_embedder("auto"), args.cache)
    if args.dense_weight is not None:
        BLOCK_OPTIONS["dense_weight"] = args.dense_weight
    for option in args.set:
        key, _, value = option.partition("=")
        whole = value.strip().lstrip("-").isdigit()  # follow_turns=0 is an int weight
        switch = value.strip().lower() in ("true", "false")  # cues=false
        read = value.strip().lower() == "true" if switch else int(value) if whole else float(value)
        if key.strip() == "signals":  # the surroundings step: on (true) or off (false)
            STEPS["signals"] = SIGNALS if read else None
        elif key.strip().startswith("signal."):  # one signal's weight: --set signal.speaker=0
            STEPS["signals"] = (STEPS.get("signals") or SIGNALS)._replace(**{key.strip()[7:]: float(read)})
        elif key.strip() in RANKING_WEIGHTS:
            STEPS[key.strip()] = read
        else:
            BLOCK_OPTIONS[key.strip()] = read
    modes = {"default": "hybrid", "bm25": "bm25", "dense": "dense"}
    results: dict[str, Any] = {}
    intervals: dict[str, dict[str, list[float]]] = {}
    halves: dict[str, tuple[Tally, Tally]] = {}
    for label in args.modes.split(","):
        started = time.perf_counter()
        results[label], halves[label] = evaluate(samples, embedder, modes[label], args.location)
        intervals[label] = gap_interval(*halves[label])
        embedder.save()
        elapsed = time.perf_counter() - started
        print_tables(label, modes[label], results[label], elapsed)
        print(f"the tuned / confirmed gap's 95% interval, resampling each half's questions: {_points(intervals[label])}")
    for label in halves:
        if label != "bm25" and "bm25" in halves:
            interval = gap_interval(*halves[label], baseline=halves["bm25"])
            intervals[f"{label} minus bm25"] = interval
            print(f"{label}'s gap minus BM25's, the same questions resampled: {_points(interval)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"data": str(args.data), "results": results, "gap_intervals": intervals}, indent=2
        )
    )
    summary = {
        label: {
            part: [table["overall"][f"recall@{k}"] for k in (5, 10)] for part, table in res.items()
        }
        for label, res in results.items()
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
