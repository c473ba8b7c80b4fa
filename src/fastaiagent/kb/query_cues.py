"""Cues a recall query carries beyond its words: who it is about, and when.

- **Participants.** In a conversation with several named speakers
  (``Message.name``), "What books has Melanie read?" is about Melanie's own
  messages. The name says little to an embedding model except "a person", so
  it is taken out of the text that is embedded (:func:`without_names`), and
  the speaker it names is returned by :func:`named_participant`, for recall
  to prefer that speaker's messages.
- **Dates.** "What did she start in December 2023?" names a month and a
  year; :func:`date_cue` reads them so recall can prefer messages recorded
  then (a message's time is its chunk's ``created_at``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_MONTH = re.compile(r"\b(" + "|".join(MONTHS) + r")\b")  # capitalised: "may" is a verb
_YEAR = re.compile(r"\b(19\d\d|20\d\d)\b")
_SPACES = re.compile(r"\s+")


def _name_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"\b{re.escape(name)}(?:'s)?\b")


def named_participant(query: str, names: Iterable[str]) -> str | None:
    """The one participant ``query`` names (whole word, case as written), else None
    (no name, or several: a question about two people prefers neither)."""
    named = [name for name in set(names) if name and _name_pattern(name).search(query)]
    return named[0] if len(named) == 1 else None


def without_names(query: str, names: Iterable[str]) -> str:
    """``query`` with every participant name (and its ``'s``) removed; the query
    itself when nothing would be left."""
    stripped = query
    for name in sorted(set(names), key=len, reverse=True):
        if name:
            stripped = _name_pattern(name).sub(" ", stripped)
    stripped = _SPACES.sub(" ", stripped).strip()
    return stripped if stripped.strip(" ?.!,'") else query


@dataclass(frozen=True)
class DateCue:
    """The months (1-12) and years a query names; either may be empty."""

    months: frozenset[int]
    years: frozenset[int]

    def matches(self, timestamp: float) -> bool:
        """Whether a message recorded at ``timestamp`` (epoch seconds, read in UTC)
        falls in a named month of a named year (an unnamed part matches any)."""
        moment = datetime.fromtimestamp(timestamp, tz=timezone.utc)
        return (not self.months or moment.month in self.months) and (
            not self.years or moment.year in self.years
        )


def date_cue(query: str) -> DateCue | None:
    """The month names and years in ``query``, or None when it names neither."""
    months = frozenset(MONTHS.index(m) + 1 for m in _MONTH.findall(query))
    years = frozenset(int(y) for y in _YEAR.findall(query))
    return DateCue(months, years) if months or years else None


__all__ = ["MONTHS", "DateCue", "date_cue", "named_participant", "without_names"]
