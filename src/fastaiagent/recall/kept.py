"""What recall reads from a text, kept between calls for short texts only.

The same facts, items and hits come back query after query, so reading them
again is the work worth keeping. A cache bounded by a count of texts alone is not
bounded in memory (a stored message may hold 64 KB): texts longer than
:data:`KEPT_TEXT_CHARS` are read on every call instead, so each cache holds at
most its count times that many characters.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import lru_cache, wraps
from typing import Any, TypeVar, cast

KEPT_TEXT_CHARS = 2_000
"""The longest text whose reading a recall cache keeps."""

F = TypeVar("F", bound=Callable[..., Any])


def kept_for_short_texts(count: int) -> Callable[[F], F]:
    """Keep what ``fn(text, *args)`` returns for the last ``count`` texts of at most
    :data:`KEPT_TEXT_CHARS` characters (``args`` hashable, as for
    :func:`functools.lru_cache`; positional only)."""

    def wrap(fn: F) -> F:
        kept = lru_cache(maxsize=count)(fn)

        @wraps(fn)
        def read(text: str, *args: Hashable) -> Any:
            return kept(text, *args) if len(text) <= KEPT_TEXT_CHARS else fn(text, *args)

        return cast(F, read)

    return wrap


__all__ = ["KEPT_TEXT_CHARS", "kept_for_short_texts"]
