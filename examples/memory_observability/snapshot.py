"""Capture the Memory and Traces pages in headless Chromium (PNG files).

Run ``companion.py`` first (it and this script read the stores in
``.fastaiagent-examples/observability/``, or ``$FASTAIAGENT_LOCAL_DB``), then:

    python examples/memory_observability/snapshot.py [--out DIR]

It serves the UI on a free loopback port for the duration, and saves:
memory.png (all scopes), memory-alice.png (scope filter), memory-history.png
("Show superseded"), memory-masked.png ("Mask secrets"), traces.png and
trace.png (the span tree of the run that taught Alice's newest fact, with
what each block recalled). Needs Debian's ``chromium`` and
``chromium-driver`` (or set FASTAIAGENT_CHROMIUM / FASTAIAGENT_CHROMEDRIVER).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("FASTAIAGENT_LOCAL_DB", ".fastaiagent-examples/observability/local.db")
CHROMIUM = os.environ.get("FASTAIAGENT_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("FASTAIAGENT_CHROMEDRIVER", "/usr/bin/chromedriver")


def start_ui() -> tuple[Any, Any, str]:
    import uvicorn

    from fastaiagent.ui import create_app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    return server, thread, f"http://127.0.0.1:{sock.getsockname()[1]}"


def start_browser(profile: str) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(Path(__file__).parent / "screenshots"))
    args = parser.parse_args()
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        print(f"Chromium not found ({CHROMIUM}, {CHROMEDRIVER}): apt-get install chromium chromium-driver")
        return 1
    from selenium.webdriver.common.by import By

    from fastaiagent.learn import MemoryStore

    newest = next((f for f in MemoryStore().browse(scope="user", scope_id="alice", limit=1)), None)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    server, thread, url = start_ui()
    with tempfile.TemporaryDirectory(prefix="fastaiagent-snapshot-") as profile:
        browser = start_browser(profile)
        try:
            pages = {
                "memory": "/memory",
                "memory-alice": "/memory?scope=user:alice",
                "memory-history": "/memory?superseded=1",
                "memory-masked": "/memory?superseded=1&mask=1",
                "traces": "/traces",
            }
            if newest is not None and newest.source_trace_id:
                pages["trace"] = f"/traces/{newest.source_trace_id}"
            for name, path in pages.items():
                browser.get(url + path)
                browser.find_element(By.TAG_NAME, "main")
                target = out / f"{name}.png"
                browser.save_screenshot(str(target))
                print(f"{path:<40} -> {target}")
        finally:
            browser.quit()
            server.should_exit = True
            thread.join(timeout=10)
    if newest is None:
        print("no facts for user:alice yet; run companion.py first for the full set")
    return 0


if __name__ == "__main__":
    sys.exit(main())
