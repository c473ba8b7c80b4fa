"""Time taken by the text readers on the largest hostile text a user can send.

Every reader that runs on what a user or a model wrote, timed on 64k characters
(``MAX_MESSAGE_CHARS``, the longest message Memory accepts; a fact is capped at
10k; a model's reply is parsed up to 50k) built from near-misses of their
patterns: runs of address characters without "@", blank lines before no
marker, dates with offsets, "eyJ" runs without dots, keys without an END, a
bullet padded with spaces, "(replaces" without its bracket. A reader whose regex starts again inside a
run it has already scanned is quadratic on such text: seconds, not ms.

Target: each reader <= 100 ms on every input (linear time; a quadratic reader
takes seconds here).

    python bench/hostile_text.py [--chars N]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _common import write_results

from fastaiagent.agent.memory_blocks.fact_policy import reads_as_instruction
from fastaiagent.agent.middleware import RedactPII
from fastaiagent.facts.scoping import MAX_MESSAGE_CHARS, normalize_text
from fastaiagent.kb.bm25 import tokenize
from fastaiagent.learn.extractor import parse_extraction
from fastaiagent.learn.stated_time import stated_validity
from fastaiagent.recall.dates import date_cue
from fastaiagent.recall.following import asks
from fastaiagent.recall.query import read_query
from fastaiagent.trace.redaction import RedactionPolicy

TARGET_MS = 100.0
UNITS = (
    "a.", "1.", "sk-a", "a@", "a@a.", "eyJ-", "eyJaaaaaaaaa.", "-----BEGIN A PRIVATE KEY----- ",
    "\n", "\n ", ":\n", "#", "ignore a ", "you ", "until ", "since ", "for ", "+1 ", "(1",
    "3 days after 16 November 2023 ", "the second week of May ", "last May ", "Ann ", "Ann's Bob's ",
    "Ann and Bob ", "?", "[",
)  # fmt: skip


def readers() -> dict[str, Callable[[str], object]]:
    policy = RedactionPolicy.default()
    now = time.time()
    speakers = {"Ann", "Bob"}
    return {
        "RedactPII.redact": RedactPII.redact,
        "RedactionPolicy.redact": policy.redact,
        "reads_as_instruction": reads_as_instruction,
        "stated_validity": lambda text: stated_validity(text, now),
        "date_cue": lambda text: date_cue(text, now),
        "read_query": lambda text: read_query(text, speakers=speakers, now=now),
        "normalize_text": normalize_text,
        "bm25.tokenize": tokenize,
        "asks": asks,
        "parse_extraction": lambda text: parse_extraction(text, 3),
    }


def texts(chars: int) -> dict[str, str]:
    """Each unit repeated to ``chars``, and a few shapes a repetition cannot make."""
    out = {repr(unit): (unit * (chars // len(unit) + 1))[:chars] for unit in UNITS}
    out["'- a', spaces, 'b'"] = "- a" + " " * (chars - 4) + "b"
    out["'- x', '(replaces' runs"] = ("- x " + "(replaces " * chars)[:chars]
    out["'- (', spaces, 'x)'"] = "- (" + " " * (chars - 5) + "x)"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=MAX_MESSAGE_CHARS)
    args = parser.parse_args(argv)
    worst: dict[str, tuple[float, str]] = {}
    inputs = texts(args.chars)
    for name, read in readers().items():
        for shape, text in inputs.items():
            started = time.perf_counter()
            read(text)
            elapsed = (time.perf_counter() - started) * 1000
            if elapsed >= worst.get(name, (-1.0, ""))[0]:
                worst[name] = (elapsed, shape)
    print(f"{'reader':24s} {'worst ms':>9s}  on")
    for name, (elapsed, shape) in sorted(worst.items(), key=lambda kv: -kv[1][0]):
        flag = "" if elapsed <= TARGET_MS else "  over target"
        print(f"{name:24s} {elapsed:9.1f}  {shape}{flag}")
    results = {name: {"worst_ms": round(ms, 2), "input": shape} for name, (ms, shape) in worst.items()}
    write_results("hostile_text", {"chars": args.chars, "target_ms": TARGET_MS, "readers": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
