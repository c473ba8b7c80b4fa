"""Real headless Chromium (Debian `chromium` + `chromium-driver`) driven by selenium.

A missing browser skips these tests on a laptop but FAILS them in CI (CI=true).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("FASTAIAGENT_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("FASTAIAGENT_CHROMEDRIVER", "/usr/bin/chromedriver")
CHROME_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _missing(message: str) -> None:
    if _in_ci():
        pytest.fail(f"{message} (CI=true: browser tests must not skip; .ci/run installs it)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the session, with a fresh profile directory."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        _missing(f"Chromium not found at {CHROMIUM} / {CHROMEDRIVER}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="fastaiagent-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    try:
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    except Exception as exc:
        shutil.rmtree(profile, ignore_errors=True)
        _missing(f"Chromium did not start: {exc}")
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
