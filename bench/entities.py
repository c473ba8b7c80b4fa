"""Entity extraction speed, and what it finds, on everyday messages.

Every turn of the everyday benchmark's conversations (bench/data/everyday:
English, German, Chinese and Japanese; personal, coding, support, group chats;
559 messages) is read by :func:`fastaiagent.recall.entities.mentions`, each
``--rounds`` times; the bench reports per-message p50 / p99 in ms, and the same
for one conversation's :class:`~fastaiagent.recall.entity_book.EntityBook`
(``observe`` with the message's text, as a store would call it, and ``resolve``
on each user turn as a query). ``--show`` prints what each conversation's book
holds, to judge the entities by eye.

Target (issue #47): extraction <= 1 ms p50 per message.

    python bench/entities.py [--rounds 20] [--show]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _common import percentile, write_results

from fastaiagent.recall.entities import mentions
from fastaiagent.recall.entity_book import EntityBook

DATA = Path(__file__).parent / "data" / "everyday"
TARGET_P50_MS = 1.0


def conversations() -> list[list[str]]:
    """The texts of each everyday conversation, in order."""
    out = []
    for path in sorted(DATA.glob("*.json")):
        for conversation in json.loads(path.read_text(encoding="utf-8"))["conversations"]:
            out.append([turn["text"] for turn in conversation["turns"]])
    return out


def timed(fn: object, texts: list[str], rounds: int) -> list[float]:
    """Milliseconds per call, each text ``rounds`` times (best of the rounds per text,
    so a neighbour's burst does not count)."""
    assert callable(fn)
    samples = []
    for text in texts:
        best = float("inf")
        for _ in range(rounds):
            start = time.perf_counter()
            fn(text)
            best = min(best, time.perf_counter() - start)
        samples.append(best * 1000)
    return samples


def figures(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(samples), 4),
        "p99_ms": round(percentile(samples, 99), 4),
        "max_ms": round(max(samples), 4),
        "n": len(samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--show", action="store_true")
    args = parser.parse_args()
    chats = conversations()
    texts = [text for chat in chats for text in chat]
    for text in texts[:100]:
        mentions(text)  # warm the regex caches
    extract = figures(timed(mentions, texts, args.rounds))
    observe_ms: list[float] = []
    resolve_ms: list[float] = []
    found = 0
    for chat in chats:
        book = EntityBook()
        for text in chat:
            start = time.perf_counter()
            book.read(text)
            observe_ms.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            book.resolve(text)
            resolve_ms.append((time.perf_counter() - start) * 1000)
        found += len(book)
        if args.show:
            print(f"--- {chat[0][:60]!r}")
            for entity in book.entities():
                print(f"  {entity.id!r:28} {entity.kind:12} x{entity.mentions} {entity.descriptions} {entity.aliases}")
    results = {
        "messages": len(texts),
        "conversations": len(chats),
        "entities_found": found,
        "mentions": extract,
        "book_observe": figures(observe_ms),
        "book_resolve": figures(resolve_ms),
        "target_p50_ms": TARGET_P50_MS,
        "meets_target": extract["p50_ms"] <= TARGET_P50_MS,
    }
    print(json.dumps(results, indent=2))
    write_results("entities", results)


if __name__ == "__main__":
    main()
