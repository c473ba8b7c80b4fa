"""Every example runs, as a user would run it, in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from _env import POSTGRES_URL, REDIS_URL, require_chromium, require_postgres, require_redis

ROOT = Path(__file__).resolve().parents[2]

# (script, arguments): scripts that need a server get its URL. The connected-memory
# example runs in tests/integration/test_plane_server.py (it needs a plane).
EXAMPLES = [
    ("examples/memory_simple/companion.py", []),
    ("examples/100_memory_in_production.py", []),
    ("examples/memory_backends/run.py", []),
    ("examples/memory_backends/run.py", [POSTGRES_URL]),
    ("examples/memory_backends/run.py", [REDIS_URL]),
]


def run_example(script: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FASTAIAGENT_LOCAL_DB": str(tmp_path / "local.db"), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.parametrize(("script", "args"), EXAMPLES, ids=[" ".join([e[0], *e[1]]) for e in EXAMPLES])
def test_example_runs(script, args, tmp_path):
    if POSTGRES_URL in args:
        require_postgres()
    if REDIS_URL in args:
        require_redis()
    done = run_example(script, args, tmp_path)
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), f"{script} printed nothing"


@pytest.mark.browser
def test_observability_examples_seed_traces_and_capture_the_pages(tmp_path):
    require_chromium()  # snapshot.py reads the same FASTAIAGENT_CHROMIUM* variables
    seeded = run_example("examples/memory_observability/companion.py", [], tmp_path)
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr
    shots = tmp_path / "shots"
    captured = run_example("examples/memory_observability/snapshot.py", ["--out", str(shots)], tmp_path)
    assert captured.returncode == 0, captured.stdout + captured.stderr
    pngs = sorted(p.name for p in shots.glob("*.png"))
    assert {"memory.png", "traces.png"} <= set(pngs)
    assert all((shots / name).stat().st_size > 5_000 for name in pngs)
