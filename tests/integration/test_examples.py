"""Every example runs, as a user would run it, in a fresh process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# (script, arguments): scripts that need a server get its URL.
EXAMPLES = [
    ("examples/memory_simple/companion.py", []),
    ("examples/100_memory_in_production.py", []),
]


@pytest.mark.parametrize(("script", "args"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_example_runs(script, args, tmp_path):
    env = {**os.environ, "FASTAIAGENT_LOCAL_DB": str(tmp_path / "local.db"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), f"{script} printed nothing"
