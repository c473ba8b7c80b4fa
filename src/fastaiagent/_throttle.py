"""Log a repeating failure once per interval, with a count of the repeats in between.

An outage seen by many users and turns should cost a few log lines, not one
per turn; every place that logs such failures shares this.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any


class LogThrottle:
    """Counts repeats of a failure and says when the next log line is due.

    ``interval`` is a callable so a module setting can be changed at run time.
    """

    def __init__(self, interval: Any) -> None:
        self._interval = interval
        self._lock = threading.Lock()
        self._last: dict[tuple[str, ...], tuple[float, int]] = {}

    def due(self, key: tuple[str, ...]) -> int | None:
        """None to stay quiet; else how many repeats were kept quiet since the last line."""
        now = time.monotonic()
        with self._lock:
            last, quiet = self._last.get(key, (float("-inf"), 0))
            if now - last < self._interval():
                self._last[key] = (last, quiet + 1)
                return None
            self._last[key] = (now, 0)
            return quiet

    def warn(self, log: logging.Logger, key: tuple[str, ...], message: str, *args: Any) -> None:
        """``log.warning(message, *args)`` when due, with the count of quiet repeats."""
        quiet = self.due(key)
        if quiet is None:
            return
        suffix = f" ({quiet} more since the last report)" if quiet else ""
        log.warning(message + "%s", *args, suffix)
