"""The UI app served by uvicorn on a free loopback port, for browser tests."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any


class LiveServer:
    """The UI app served by uvicorn on a free loopback port, in a thread."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the UI server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


def _gone(element: Any) -> Any:
    """A wait condition: ``element``'s page has been replaced. Chrome reports a node of
    the old page as stale, or, mid-navigation, as not belonging to the document."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    def check(_driver: Any) -> bool:
        try:
            element.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            if "does not belong to the document" in str(exc) or "No node with given id" in str(exc):
                return True
            raise
        return False

    return check


def navigate(driver: Any, element: Any) -> None:
    """Click something that loads a new page, and wait until the new page is there."""
    from selenium.webdriver.support.ui import WebDriverWait

    element.click()
    WebDriverWait(driver, 15).until(_gone(element))
    WebDriverWait(driver, 15).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )
