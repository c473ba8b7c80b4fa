"""Wait for a condition instead of sleeping a fixed time: fast when it holds early,
patient on a slow CI machine, and a clear message when it never holds."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T], what: str, timeout: float = 10.0, interval: float = 0.02
) -> T:
    """Poll ``condition`` until it returns something truthy; return that value.

    Raises AssertionError naming ``what`` if it is still falsy after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting until {what}")
        time.sleep(interval)
