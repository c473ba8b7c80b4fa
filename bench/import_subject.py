"""An import's memory against one subject's size: ``fastaiagent memory import`` of a
file holding ``--facts`` facts of ONE user (one in ten a replaced version, so
history is replayed) into an empty SQLite location, in a process of its own,
with its peak RSS. Before the import kept what it knew of a subject on disk,
the peak grew with the subject (497 MB for a million facts).

    python bench/import_subject.py --facts 1000000
    python bench/import_subject.py --facts 200000 --src /path/to/another/src   # compare

Results go to bench/results/import_subject.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import write_results

CHILD = """
import resource, sys, time
from fastaiagent.facts.transfer import import_memory
start = time.perf_counter()
counts = import_memory(sys.argv[1], sys.argv[2])
print(counts.facts, round(time.perf_counter() - start, 1), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def write_file(path: Path, facts: int) -> None:
    """ann's export: ``facts`` facts, each tenth replacing the one before it."""
    fact = {"kind": "fact", "scope": "user", "scope_id": "ann", "project_id": "", "confidence": 1.0,
            "source": "manual", "source_trace_id": None, "metadata": {}, "superseded_at": None,
            "valid_from": None, "valid_to": None}  # fmt: skip
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"kind": "fastaiagent-memory", "version": 1, "user_id": "ann",
                              "project_id": "", "dimension": None}) + "\n")  # fmt: skip
        for n in range(1, facts + 1):
            replaced = (n + 1) % 10 == 0 and n < facts  # n is replaced by n + 1
            line = {**fact, "id": n, "fact": f"ann fact {n}", "created_at": 1_700_000_000.0 + n,
                    "superseded_by": n + 1 if replaced else None,
                    "superseded_at": 1_700_000_001.0 + n if replaced else None}  # fmt: skip
            out.write(json.dumps(line) + "\n")
        out.write(json.dumps({"kind": "end", "counts": {"facts": facts}}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--facts", type=int, default=1_000_000)
    parser.add_argument("--src", default=str(Path(__file__).parent.parent / "src"), help="the package to run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ann.jsonl"
        write_file(path, args.facts)
        env = {**os.environ, "PYTHONPATH": args.src}
        done = subprocess.run(
            [sys.executable, "-c", CHILD, f"sqlite:///{folder}/target.db", str(path)],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        written, seconds, peak_kb = done.stdout.split()
        result = {"facts": args.facts, "written": int(written), "seconds": float(seconds),
                  "peak_rss_mb": round(int(peak_kb) / 1024, 1), "file_mb": round(path.stat().st_size / 1e6, 1)}  # fmt: skip
    print(json.dumps(result))
    write_results("import_subject", result)


if __name__ == "__main__":
    main()
