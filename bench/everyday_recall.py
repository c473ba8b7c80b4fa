"""Everyday recall: VectorBlock on ordinary conversations, with and without its ranking cues.

LoCoMo (bench/locomo_recall.py) is two friends chatting; this bench asks what
recall does on the conversations an assistant meets every day, one data file
per kind in ``bench/data/everyday/<kind>.json`` (written for this bench):

- ``support``: a customer states short facts, the assistant answers at length;
- ``coding``: a developer's stack, errors, versions and decisions;
- ``group``: a group chat whose members are named Will, Grace, Mark, Bill,
  Rose and June, asked questions that start with those words as words
  ("Will the ...", "Grace period ...") as well as about the members;
- ``personal``: a personal assistant over months, facts that change, questions
  that name a time ("in March", "last month": read at the file's ``now``);
- ``german`` and ``cjk`` (Chinese): a conversation and its questions in that language;
- ``dates_in_text``: messages that talk about dates and numbers ("the 2024
  release", "2048-bit keys") said at other times.

That is the ``tuning`` set: recall was tuned on it. ``--set fresh`` reads
``bench/data/everyday_fresh/`` instead, written before the recall redesign of
issue 47 and not to be tuned on (report it as it comes out):

- ``household``: a couple's house, greyhound, family and car over five months;
- ``fitness``: a runner's training, injuries, physio and blood tests;
- ``team``: an engineering team's channel, five people, no assistant;
- ``german_family``: a German family's child care, cat and a grandmother's 90th.

Questions marked ``"linked": true`` need a link across sessions: the answer turn
names a person, pet or thing differently from the question ("Juniper" /
"the greyhound", "the woman next door" / "Pat"); they are also reported
together as the row ``linked``. ``--set tuning,fresh`` reports both sets.

A data file is::

    {"kind": "support", "now": "2025-03-14T12:00:00Z",    # when questions are asked (UTC)
     "conversations": [{"id": "support-dana",
        "turns": [{"id": "t1", "speaker": "Dana", "role": "user" | "assistant",
                   "at": "2025-03-03T01:10:00Z", "text": "..."}, ...],
        "questions": [{"q": "What is my order number?", "answers": ["t3"]}, ...]}]}

A question's ``answers`` are the turns where its fact is stated (mostly the user's
own words); an assistant reply that only reacts to it does not count.

Each conversation goes through its own VectorBlock (in-process FAISS store,
the offline embedder): a user turn is ``UserMessage(text, name=speaker)``, an
assistant turn ``AssistantMessage(text)`` (no name, as an agent's replies
have), said at the turn's ``at``; the block's clock reads the file's ``now``.
Each question is then recalled (``top_k`` 5, one chunk per turn) and scored:
hit@k, the share of questions with an answer turn among the first k turns
recalled (k = 1, 3, 5), MRR, the mean reciprocal rank of the first answer turn
in the first 5 (0 when none is), and R@5, the mean share of a question's
answer turns in the first 5. Under the table, the kinds where ``default`` does
worse than ``cues_off`` on hit@3 or MRR.

Two configurations by default: ``default`` (VectorBlock's defaults) and ``cues_off``,
``RecallOptions(cues=False)``: every ranking step of ``fastaiagent.recall.ranking``
after fusion off (``recall.weights.Ranking.off()``). What stays is the fused dense
+ BM25 ranking, each message indexed with the previous one's keywords
(``context_turns=1``) and embedded with the question it answers (indexing rather
than ranking); the participants' names are still taken out of the embedded
query. ``no_<step>`` turns one step of ``Ranking`` off and leaves the others on
(an ablation).

    python bench/everyday_recall.py [--set tuning|fresh|tuning,fresh] [--kinds support,coding,...]
                                    [--configs default,cues_off] [--json] [--misses]

The table goes to stdout, every question's recalled turns to
bench/results/everyday_recall.json (``everyday_recall_fresh.json`` for the fresh set); ``--json`` ends with one JSON summary line,
``--misses`` lists the questions each configuration misses at 5.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the local model is read from the cache

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from locomo_recall import CachingEmbedder, TurnTaggedBlock, recall_store, turns_in

from fastaiagent.kb.embedding import get_embedder
from fastaiagent.llm.message import AssistantMessage, Message, UserMessage
from fastaiagent.recall.weights import SIGNALS

HERE = Path(__file__).parent
DATA = {"tuning": HERE / "data" / "everyday", "fresh": HERE / "data" / "everyday_fresh"}
OUT = {
    "tuning": HERE / "results" / "everyday_recall.json",
    "fresh": HERE / "results" / "everyday_recall_fresh.json",
}
KINDS = {
    "tuning": ("support", "coding", "group", "personal", "german", "cjk", "dates_in_text"),
    "fresh": ("household", "fitness", "team", "german_family"),
}
TOP_K = 5
COLUMNS = ("hit@1", "hit@3", "hit@5", "MRR", "R@5")
COMPARED = ("hit@3", "MRR")  # default should be at least as good as cues_off on these
CUES_OFF: dict[str, Any] = {"cues": False}
# Each ranking step's weight when off (recall.weights.Ranking).
STEPS_OFF: dict[str, Any] = {
    "participant": 0.0, "date": 0.0, "time_order": 0.0, "reply_drop": 0.0,
    "question_drop": 0.0, "follow_turns": 0, "signals": None,
}  # fmt: skip
# One step off at a time (the others at their defaults): ``--configs default,no_date,...``.
ABLATIONS: dict[str, dict[str, Any]] = {
    f"no_{name}": {"steps": {name: value}} for name, value in STEPS_OFF.items()
}
# One signal of the surroundings step off (``no_signal_neighbour``, ...).
ABLATIONS.update(
    (f"no_signal_{name}", {"steps": {"signals": SIGNALS._replace(**{name: 0.0})}})
    for name in SIGNALS._fields if getattr(SIGNALS, name)
)  # fmt: skip
CONFIGS: dict[str, dict[str, Any]] = {"default": {}, "cues_off": CUES_OFF, **ABLATIONS}
DEFAULT_CONFIGS = "default,cues_off"


@dataclass
class Tally:
    """Each question's rank of its first answer turn (None: not in the top 5), its
    R@5, and the questions missed at 5."""

    ranks: list[int | None] = field(default_factory=list)
    recalls: list[float] = field(default_factory=list)
    misses: list[str] = field(default_factory=list)

    def add(self, got: list[str], answers: list[str], question: str) -> None:
        wanted = set(answers)
        rank = next((i + 1 for i, turn in enumerate(got[:TOP_K]) if turn in wanted), None)
        self.ranks.append(rank)
        self.recalls.append(len(wanted & set(got[:TOP_K])) / len(wanted))
        if rank is None:
            self.misses.append(question)

    def merge(self, other: Tally) -> None:
        self.ranks += other.ranks
        self.recalls += other.recalls
        self.misses += other.misses

    def row(self) -> dict[str, Any]:
        n = len(self.ranks)

        def share(values: list[float]) -> float:
            return round(sum(values) / n, 3) if n else 0.0

        hits = {f"hit@{k}": share([r is not None and r <= k for r in self.ranks]) for k in (1, 3, 5)}
        mrr = share([1 / r if r is not None else 0.0 for r in self.ranks])
        return {"n": n, **hits, "MRR": mrr, "R@5": share(self.recalls)}


def epoch(moment: str) -> float:
    """An ISO datetime (``Z`` or an offset) as UNIX seconds."""
    return datetime.fromisoformat(moment.replace("Z", "+00:00")).timestamp()


def message_of(turn: dict[str, Any]) -> Message:
    if turn["role"] == "assistant":
        return AssistantMessage(turn["text"])
    return UserMessage(turn["text"], name=turn["speaker"])


LOCATION: list[str | None] = [None]  # --location: the durable index of a fact store
_FED = [0]


def fed_block(
    conversation: dict[str, Any], now: float, embedder: Any, options: dict[str, Any]
) -> TurnTaggedBlock:
    """A fresh block (own store and namespace) holding every turn of ``conversation``;
    ``options["steps"]``: ranking weights changed (``Ranking.with_``). On a durable
    location each block gets a user namespace of its own (the entity side keeps a
    book per user)."""
    options = dict(options)
    steps = options.pop("steps", {})
    _FED[0] += 1
    location = LOCATION[0]
    block = TurnTaggedBlock(
        recall_store(location, embedder),
        namespace=f"everyday:{conversation['id']}" if location is None else f"user:e{_FED[0]}-{conversation['id']}",
        embedder=embedder,
        top_k=TOP_K,
        clock=lambda: now,
        **options,
    )
    block.ranking = block.ranking.with_(**steps)
    for turn in conversation["turns"]:
        block.turn = turn["id"]
        block.on_message(message_of(turn), at=epoch(turn["at"]))
    block.flush()
    return block


def run_kind(
    data: dict[str, Any], embedder: Any, options: dict[str, Any]
) -> tuple[Tally, Tally, list[dict[str, Any]]]:
    """The kind's tally under ``options``, that of its linked questions, and each
    question's recalled turns."""
    tally, linked, asked = Tally(), Tally(), []
    now = epoch(data["now"])
    for conversation in data["conversations"]:
        block = fed_block(conversation, now, embedder, options)
        for question in conversation["questions"]:
            got = turns_in(block.recall(question["q"]))[:TOP_K]
            label = f"{conversation['id']}: {question['q']}"
            tally.add(got, question["answers"], label)
            if question.get("linked"):
                linked.add(got, question["answers"], label)
            asked.append({**question, "conversation": conversation["id"], "got": got})
    return tally, linked, asked


def load(kind: str, data_set: str = "tuning") -> dict[str, Any]:
    path = DATA[data_set] / f"{kind}.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def print_table(rows: dict[str, dict[str, dict[str, Any]]]) -> None:
    wide = max([len("config")] + [len(config) for by_config in rows.values() for config in by_config])
    print(f"{'kind':<14} {'config':<{wide}} {'n':>4} " + " ".join(f"{c:>6}" for c in COLUMNS))
    for kind, by_config in rows.items():
        for config, row in by_config.items():
            values = " ".join(f"{row[c]:>6.3f}" for c in COLUMNS)
            print(f"{kind:<14} {config:<{wide}} {row['n']:>4} {values}")


def print_worse(rows: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Where ``default`` falls below ``cues_off`` (both run), per kind and figure."""
    worse = [
        f"{kind} {column} {by_config['default'][column]:.3f} < {by_config['cues_off'][column]:.3f}"
        for kind, by_config in rows.items()
        if "default" in by_config and "cues_off" in by_config
        for column in COMPARED
        if by_config["default"][column] < by_config["cues_off"][column]
    ]
    if any("default" in c and "cues_off" in c for c in rows.values()):
        print("default below cues_off: " + ("; ".join(worse) if worse else "nowhere"))


def print_misses(tallies: dict[str, dict[str, Tally]]) -> None:
    kinds = [kind for kind in tallies if kind not in ("all", "linked")]
    for config in tallies["all"]:
        print(f"\nmissed at 5 ({config}):")
        for kind in kinds:
            for question in tallies[kind][config].misses:
                print(f"  [{kind}] {question}")


def evaluate(
    kinds: list[str], configs: list[str], embedder: CachingEmbedder, data_set: str = "tuning"
) -> tuple[dict[str, dict[str, Tally]], dict[str, Any]]:
    """Per kind and configuration, the tally and every question's recalled turns;
    ``all`` sums the kinds, ``linked`` (when any) their linked questions."""
    tallies: dict[str, dict[str, Tally]] = {}
    linked: dict[str, Tally] = {config: Tally() for config in configs}
    questions: dict[str, Any] = {}
    for kind in kinds:
        data = load(kind, data_set)
        tallies[kind], questions[kind] = {}, {}
        for config in configs:
            tally, linked_tally, asked = run_kind(data, embedder, CONFIGS[config])
            tallies[kind][config], questions[kind][config] = tally, asked
            linked[config].merge(linked_tally)
    tallies["all"] = {config: Tally() for config in configs}
    for kind in kinds:
        for config in configs:
            tallies["all"][config].merge(tallies[kind][config])
    if any(tally.ranks for tally in linked.values()):
        tallies["linked"] = linked
    return tallies, questions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--set", dest="sets", default="tuning", help="tuning, fresh or tuning,fresh"
    )
    parser.add_argument("--kinds", default=None, help="of the set's kinds (default: all)")
    parser.add_argument(
        "--configs", default=DEFAULT_CONFIGS, help=f"of {', '.join(CONFIGS)}"
    )
    parser.add_argument("--json", action="store_true", help="end with one JSON summary line")
    parser.add_argument("--misses", action="store_true", help="list the questions missed at 5")
    parser.add_argument(
        "--location", default=None,
        help="a fact store (e.g. sqlite:////tmp/everyday.db): recall through its durable "
        "index, entity side included (default: the in-process FAISS store)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    LOCATION[0] = args.location
    sets, configs = args.sets.split(","), args.configs.split(",")
    known = [kind for data_set in sets for kind in KINDS.get(data_set, ())]
    kinds = args.kinds.split(",") if args.kinds else known
    unknown = (
        [s for s in sets if s not in KINDS]
        + [k for k in kinds if k not in known]
        + [c for c in configs if c not in CONFIGS]
    )
    if unknown:
        parser.error(f"unknown set, kind or config: {', '.join(unknown)}")
    embedder = CachingEmbedder(get_embedder("auto"))
    summary: dict[str, Any] = {}
    for data_set in sets:
        started = time.perf_counter()
        chosen = [kind for kind in KINDS[data_set] if kind in kinds]
        tallies, questions = evaluate(chosen, configs, embedder, data_set)
        rows = {k: {c: t.row() for c, t in by_config.items()} for k, by_config in tallies.items()}
        print(f"\n{data_set} set")
        print_table(rows)
        print_worse(rows)
        print(f"({time.perf_counter() - started:.1f} s)")
        if args.misses:
            print_misses(tallies)
        OUT[data_set].parent.mkdir(parents=True, exist_ok=True)
        OUT[data_set].write_text(
            json.dumps({"results": rows, "questions": questions}, indent=1, ensure_ascii=False)
        )
        summary[data_set] = rows
    if args.json:
        print(json.dumps(summary if len(sets) > 1 else summary[sets[0]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
