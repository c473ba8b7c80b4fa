"""Without Chromium every browser test skips with the reason on a laptop and fails under CI=true.

Runs the real browser tests in a child pytest with FASTAIAGENT_CHROMIUM pointing at
a path that does not exist, so this checks the behaviour without uninstalling Chromium.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Every test that needs the browser: the page tests and the screenshot example.
BROWSER_TESTS = [
    "tests/browser/test_memory_page_browser.py",
    "tests/integration/test_examples.py::test_observability_examples_seed_traces_and_capture_the_pages",
]


def run_without_chromium(tmp_path: Path, ci: bool) -> tuple[int, dict[str, str], str]:
    """Run BROWSER_TESTS in a child pytest; return (exit code, {test: outcome}, output)."""
    missing = tmp_path / "no-such-chromium"
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["FASTAIAGENT_CHROMIUM"] = str(missing)
    if ci:
        env["CI"] = "true"
    report = tmp_path / f"report-ci-{ci}.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         f"--junitxml={report}", *BROWSER_TESTS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    outcomes: dict[str, str] = {}
    for case in ET.parse(report).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("skipped", "failure", "error")]
        outcomes[f"{case.get('classname')}.{case.get('name')}"] = kinds[0] if kinds else "passed"
    return done.returncode, outcomes, done.stdout + done.stderr


@pytest.mark.slow
def test_without_chromium_browser_tests_skip_with_the_reason(tmp_path):
    code, outcomes, output = run_without_chromium(tmp_path, ci=False)
    assert code == 0, output
    assert len(outcomes) >= 7, output  # six page tests and the example
    assert set(outcomes.values()) == {"skipped"}, outcomes
    assert f"Chromium not found at {tmp_path / 'no-such-chromium'}" in output
    assert "apt-get install chromium chromium-driver" in output


@pytest.mark.slow
def test_without_chromium_browser_tests_fail_under_ci(tmp_path):
    code, outcomes, output = run_without_chromium(tmp_path, ci=True)
    assert code == 1, output
    assert len(outcomes) >= 7, output
    # A missing browser in a fixture is a setup error, in a test body a failure: never a skip.
    assert set(outcomes.values()) <= {"failure", "error"}, outcomes
    assert "CI=true: this test must not skip" in output
