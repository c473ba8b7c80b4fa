"""`fastaiagent demo` (what `make demo` runs) works offline on the embedded default."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.embedder
def test_demo_runs_offline_and_shows_isolation_and_semantic_retrieval(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "FASTAIAGENT_LLM_BASE_URL",
            "FASTAIAGENT_LOCAL_DB",
        )
    }
    env.update(HF_HUB_OFFLINE="1", COLUMNS="120")
    done = subprocess.run(
        [sys.executable, "-m", "fastaiagent.cli", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "OFFLINE test model" in out
    assert "isolation holds" in out
    assert "-> The user is allergic to peanuts" in out
    assert (tmp_path / ".fastaiagent" / "local.db").is_file()
    assert "[offline model]" in out
    assert '"The user is allergic to peanuts" (manual)' in out  # quoted, with its source
    assert "Remembered notes" not in out  # the preamble is not listed as a fact
