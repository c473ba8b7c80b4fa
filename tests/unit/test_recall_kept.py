"""Recall's text caches keep short texts only, so their memory is bounded by
count x KEPT_TEXT_CHARS whatever the texts stored (a message may hold 64 KB)."""

from __future__ import annotations

from fastaiagent.recall import following
from fastaiagent.recall.kept import KEPT_TEXT_CHARS, kept_for_short_texts


def test_short_texts_are_read_once_and_long_ones_every_time() -> None:
    reads: list[int] = []

    @kept_for_short_texts(4)
    def length(text: str, extra: int) -> int:
        reads.append(len(text))
        return len(text) + extra

    short, long = "a" * KEPT_TEXT_CHARS, "b" * (KEPT_TEXT_CHARS + 1)
    assert [length(short, 1), length(short, 1)] == [KEPT_TEXT_CHARS + 1] * 2
    assert [length(long, 0), length(long, 0)] == [KEPT_TEXT_CHARS + 1] * 2
    assert reads == [KEPT_TEXT_CHARS, KEPT_TEXT_CHARS + 1, KEPT_TEXT_CHARS + 1]
    for n in range(5):  # the oldest of 5 short texts leaves a cache of 4
        length(str(n), 0)
    length("0", 0)
    assert reads[-1] == 1 and len(reads) == 3 + 5 + 1


def test_a_long_message_still_reads_as_a_question() -> None:
    assert following.asks("x " * 40_000 + "is it?")
    assert not following.asks("x " * 40_000 + "it is.")
