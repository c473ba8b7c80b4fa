"""The README's Quick start runs as written: offline, no key, and it prints what was learned."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "FASTAIAGENT_LLM_BASE_URL", "FASTAIAGENT_LOCAL_DB")


def quick_start() -> str:
    """The first Python block under the README's "## Quick start" heading."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "the Quick start has no ```python block"
    return match.group(1)


def test_quick_start_runs_offline_and_prints_what_it_remembered(tmp_path: Path) -> None:
    script = tmp_path / "quickstart.py"
    script.write_text(quick_start(), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    env["HF_HUB_OFFLINE"] = "1"
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "remembered: Name is Alice (learned)" in lines
    assert "remembered: Lives in Paris (learned)" in lines
    # The second turn was answered from memory, not by echoing the prompt.
    assert "Name is Alice" in lines[0] and "Remembered notes" not in done.stdout
    # The block keeps its data in its own file, not in the default location.
    assert not (tmp_path / ".fastaiagent").exists()
