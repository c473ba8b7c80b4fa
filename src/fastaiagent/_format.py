"""Text shown to people by the faces (CLI, web UI, plane server): times and short reasons.

One place, so ``fastaiagent learn list`` and the Memory page print a time the
same way, and every face cuts an error down to the same single line.
"""

from __future__ import annotations

from datetime import datetime, timezone

MAX_REASON = 300  # a reason is one line a person reads, not a dump


def format_time(seconds: float) -> str:
    """A UNIX time as ``YYYY-MM-DD HH:MM:SS UTC``; "" for 0 / unset."""
    if not seconds:
        return ""
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def one_line(error: BaseException | str, limit: int = MAX_REASON) -> str:
    """An error as one short line: whitespace collapsed, at most ``limit`` characters
    (a longer one loses its middle, so its start and its fix both stay).

    ``KeyError`` keeps its message without the quotes ``str()`` adds; an error
    with no message is named by its type.
    """
    if isinstance(error, KeyError) and len(error.args) == 1:
        text = str(error.args[0])
    else:
        text = str(error)
    text = " ".join(text.split())
    if not text and isinstance(error, BaseException):
        text = type(error).__name__
    if len(text) <= limit:
        return text
    # Cut in the middle: what failed starts an error and what to do ends it.
    half = (limit - 1) // 2
    return f"{text[:half]}…{text[len(text) - (limit - 1 - half):]}"
