"""The integration examples run as a user runs them (no arguments: their demo),
offline, each turn in a new process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from _env import require_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("script", "module", "expected"),
    [
        ("examples/integrations/langgraph/chat_memory.py", "langgraph", "Turn 2 of this thread. I remember: I drink green tea"),
        ("examples/integrations/openai_agents/chat_session.py", "agents", "Facts: - I am allergic to peanuts"),
    ],
)
def test_example_demo_runs(script: str, module: str, expected: str, tmp_path: Path) -> None:
    require_module(module)
    done = subprocess.run(
        [sys.executable, str(ROOT / script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "FASTAIAGENT_LOCAL_DB": str(tmp_path / "local.db"), "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert expected in done.stdout, done.stdout
