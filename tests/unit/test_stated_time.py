"""When a learned fact holds, read from its text against a fixed "now" (UTC days)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from fastaiagent.learn.stated_time import stated_validity

TUESDAY = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)


def _at(*parts: int) -> float:
    return datetime(*parts, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Has a 20% discount until Friday", (None, _at(2026, 12, 5))),  # over on Saturday
        ("Works from home till tomorrow", (None, _at(2026, 12, 3))),
        ("On call until the end of the month", (None, _at(2027, 1, 1))),
        ("On leave until December 24", (None, _at(2026, 12, 25))),
        ("Away until 2026-12-10", (None, _at(2026, 12, 11))),
        ("Lives in Berlin since 2024", (_at(2024, 1, 1), None)),
        ("Vegetarian since March 2023", (_at(2023, 3, 1), None)),
        ("Member since 2025-03-04", (_at(2025, 3, 4), None)),
        ("Starts the new job from Monday", (_at(2026, 12, 7), None)),
        ("Travelling for 2 weeks", (None, _at(2026, 12, 15, 10))),
    ],
)
def test_stated_phrases(text: str, expected: tuple[float | None, float | None]) -> None:
    assert stated_validity(text, TUESDAY.timestamp()) == expected


@pytest.mark.parametrize(
    "text",
    ["Is from Spain", "Prefers email", "Allergic until 2020", "Lives in Mayotte", "until whenever"],
)
def test_text_without_a_usable_time_states_nothing(text: str) -> None:
    assert stated_validity(text, TUESDAY.timestamp()) == (None, None)


def test_said_on_the_friday_itself_it_holds_through_that_day() -> None:
    friday = datetime(2026, 12, 4, 18, 0, tzinfo=timezone.utc).timestamp()
    assert stated_validity("Free shipping until Friday", friday) == (None, _at(2026, 12, 5))
