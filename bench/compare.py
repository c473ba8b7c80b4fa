"""Time a bench on an older commit and on the working tree, alternately, in one run.

A change may not make a read, a turn or a recall slower, and the machine's load
drifts: so each round runs the bench once on each side, one after the other,
in fresh processes, and the figures are the medians over the rounds. The base
commit is checked out in a git worktree (``.bench-base/<rev>``, kept for the
next run); both sides run the *working tree's* copy of the bench with the
other side's package first on ``PYTHONPATH``, so the workload is the same.
The bench must print one JSON object of figures as its last line
(``--json``; ``bench/read_path.py`` does), or a list of them, one per case
(``bench/recall_turns.py``), whose figures are then numbered by case.

Run: ``python bench/compare.py --base ab594ca [--rounds 5] [--bench read_path] [-- bench args]``.
Ratios are head / base; for rates (``*_per_s``) higher is better, else lower.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def worktree(rev: str) -> Path:
    """A checkout of ``rev`` beside the repository's files (made once, then reused)."""
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT, check=True,
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    place = ROOT / ".bench-base" / sha[:12]
    if not (place / "src" / "fastaiagent").is_dir():
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=True)
        subprocess.run(["git", "worktree", "add", "--detach", str(place), sha], cwd=ROOT, check=True, capture_output=True)
    return place


def run_side(src: Path, bench: Path, args: list[str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, str(bench), "--json", *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{bench.name} failed with {src}:\n{done.stderr[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if isinstance(figures, list):  # one object per case (recall_turns): numbered when several
        return {f"{i}_{k}" if len(figures) > 1 else k: v for i, case in enumerate(figures) for k, v in case.items()}
    return dict(figures)


def better(name: str, ratio: float) -> str:
    higher_is_better = name.endswith("_per_s")
    if abs(ratio - 1) <= 0.05:
        return "same"
    return "better" if (ratio > 1) == higher_is_better else "WORSE"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the commit to compare with (any git revision)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bench", default="read_path", help="a bench/ module that prints JSON with --json")
    parser.add_argument("rest", nargs="*", help="arguments for the bench (after --)")
    args = parser.parse_args()
    bench = ROOT / "bench" / f"{args.bench}.py"
    sides = {"base": worktree(args.base) / "src", "head": ROOT / "src"}
    runs: dict[str, list[dict[str, Any]]] = {"base": [], "head": []}
    for number in range(args.rounds):
        order = ("base", "head") if number % 2 == 0 else ("head", "base")  # neither side always first
        for side in order:
            runs[side].append(run_side(sides[side], bench, args.rest))
            print(f"round {number + 1} {side}: {json.dumps(runs[side][-1])}", flush=True)
    print(f"\n{args.bench}: median of {args.rounds} alternated rounds, base {args.base}")
    print(f"{'figure':<24}{'base':>12}{'head':>12}{'head/base':>11}")
    worse = 0
    for name in runs["base"][0]:
        values = [[run[name] for run in runs[side]] for side in ("base", "head")]
        if not all(isinstance(v, int | float) for v in values[0] + values[1]):
            continue
        base, head = statistics.median(values[0]), statistics.median(values[1])
        ratio = head / base if base else float("inf")
        verdict = better(name, ratio)
        worse += verdict == "WORSE"
        print(f"{name:<24}{base:>12.4g}{head:>12.4g}{ratio:>11.3f}  {verdict}")
    return 1 if worse else 0


if __name__ == "__main__":
    raise SystemExit(main())
