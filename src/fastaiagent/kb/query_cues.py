"""Cues a recall query carries beyond its words: who it is about, and when.

- **Participants.** In a conversation with several named speakers
  (``Message.name``), "What books has Melanie read?" is about Melanie's own
  messages. The name says little to an embedding model except "a person", so
  it is taken out of the text that is embedded (:func:`without_names`), and
  the speaker it names is returned by :func:`named_participant`, for recall
  to prefer that speaker's messages.
- **Dates.** "What did she start in December 2023?" names a month and a
  year; "What did he do two weeks before 11 August 2023?" or "what did I say
  yesterday?" point to spans of time (:mod:`fastaiagent.kb.query_dates`).
  :func:`date_cue` reads both so recall can prefer messages recorded then (a
  message's time is its chunk's ``created_at``). "Now" and "currently" point
  to the latest of what answers, "originally" and "at first" to the earliest
  (:func:`time_order`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo

from fastaiagent._dates import DAY, month_length, month_start
from fastaiagent.kb.query_dates import Span, read_times, span

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
# A month or a year is a time the query points to only where it says when: after a
# word of time ("in May", "since 2019", "early March") or beside another part of a
# date ("May 2023", "2023 in May" is rare). As a name of a thing it is content: "the
# 2024 release", "2048-bit keys", "the March incident", "June weekend plans".
_WHEN = (
    r"(?:\b(?:in|on|during|since|before|after|between|until|till|by|from|of|around|through|"
    r"throughout|early|late|mid|last|next|this|that)\s+(?:(?:early|late|mid)[\s-]+)?)"
)
_MONTH_NAME = r"(" + "|".join(MONTHS) + r")"  # capitalised: "may" is a verb
_MONTH = re.compile(
    rf"(?:{_WHEN}{_MONTH_NAME}\b|\b{_MONTH_NAME}(?=\s+\d{{1,2}}\b|,?\s+(?:19|20)\d\d\b))"
)
_YEAR_AFTER = (  # what a year beside it completes: a month (and day), a season
    rf"\b(?:{'|'.join(MONTHS)})(?:\s+\d{{1,2}})?,?\s*|\b(?:spring|summer|autumn|fall|winter)\s+"
)
_YEAR = re.compile(rf"(?:{_WHEN}|{_YEAR_AFTER})((?:19|20)\d\d)\b(?![-\w])")
_SPACES = re.compile(r"\s+")
_PAIRED = re.compile(r"\s*(?:,|and|or|&|, and|, or)\s*", re.IGNORECASE)  # "Jon and Gina"
# A month named without a year ("in May") is looked for in this many years up to now.
YEARS_BACK = 30


def _name_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"\b{re.escape(name)}(?:'s)?\b")


_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+)[\"'(\[]*$")


def _name_matches(name: str, query: str) -> list[re.Match[str]]:
    """Where ``query`` uses ``name`` as a name. A word opening a sentence is
    capitalised by its place, so there it is a name only as an owner ("Ana's
    sister ..."): "Will the refund arrive?", "Mark the ticket", "Grace period"
    name nobody, even in a chat with a Will, a Mark and a Grace."""
    return [
        match
        for match in _name_pattern(name).finditer(query)
        if match.end() - match.start() > len(name) or not _SENTENCE_START.search(query[: match.start()])
    ]


def named_participant(query: str, names: Iterable[str]) -> str | None:
    """The participant ``query`` is about (whole word, case as written, used as a
    name: not a word that opens a sentence, see :func:`_name_matches`), else None.

    A query naming one participant is about that one. Naming several, it is
    about the first it names as a subject: not as an owner ("Caroline's
    decision") and not in a pair ("Did Jon and Gina both ...", which prefers
    neither), so "What did Jon say about Gina's store?" and "What does Jon
    tell Gina?" are both about Jon."""
    found = sorted(
        (match.start(), match.end(), name)
        for name in set(names)
        if name
        for match in _name_matches(name, query)
    )
    if len({name for _, _, name in found}) <= 1:
        return found[0][2] if found else None
    for index, (start, end, name) in enumerate(found):
        if end - start > len(name):  # "Caroline's": an owner, not the subject
            continue
        before = found[index - 1] if index else None
        after = found[index + 1] if index + 1 < len(found) else None
        paired = (before is not None and _PAIRED.fullmatch(query[before[1] : start])) or (
            after is not None and _PAIRED.fullmatch(query[end : after[0]])
        )
        return None if paired else name
    return None


def without_names(query: str, names: Iterable[str]) -> str:
    """``query`` with every participant name (and its ``'s``) removed; the query
    itself when nothing would be left."""
    stripped = query
    for name in sorted(set(names), key=len, reverse=True):
        for match in reversed(_name_matches(name, stripped) if name else []):
            stripped = stripped[: match.start()] + " " + stripped[match.end() :]
    stripped = _SPACES.sub(" ", stripped).strip()
    return stripped if stripped.strip(" ?.!,'") else query


# "What did you suggest ...", "you told me": a question about the agent's own words.
_ABOUT_REPLIES = re.compile(
    r"\b(?:did you|you (?:said|told|suggested|recommended|mentioned|proposed|advised|meant))\b",
    re.IGNORECASE,
)


def asks_about_replies(query: str) -> bool:
    """Whether ``query`` asks what the agent said ("What did you suggest for ...?",
    "the cable you recommended"), read in English: then the agent's replies are
    not ranked below the user's messages (``reply_drop``)."""
    return _ABOUT_REPLIES.search(query) is not None


# "What do we use for jobs now?", "my current address": the latest of what was said;
# "the colour I originally bought", "一开始": the earliest. English, German and
# Chinese / Japanese words (docs/semantic.md lists the languages). "first" and
# "before" are left out: "first place", "the week before 3 June" are no such cue.
_LATEST = re.compile(
    r"\b(?:now|nowadays|currently|current|latest|these days|at the moment|"
    r"jetzt|aktuell|aktuelle[nrs]?|derzeit|momentan|inzwischen|mittlerweile)\b|现在|目前|如今|現在|最新",
    re.IGNORECASE,
)
_EARLIEST = re.compile(
    r"\b(?:originally|initially|at first|to begin with|at the outset|"
    r"ursprünglich|anfangs|zunächst|am anfang)\b|一开始|最初|起初|原本|当初|元々|もともと",
    re.IGNORECASE,
)


def time_order(query: str) -> int:
    """1 when ``query`` asks how things stand now ("Where do migrations run now?",
    "现在的预算是多少？"), -1 when it asks how they were at first ("What colour did I
    originally order?"), else 0 (also when it asks both). Of the messages that
    answer, the later (or earliest) ones say it: a plan changed, a budget grew."""
    return int(_LATEST.search(query) is not None) - int(_EARLIEST.search(query) is not None)


@dataclass(frozen=True)
class DateCue:
    """The months (1-12) and years a query names, and the spans of time it points
    to (``(start, end)`` UNIX seconds, end exclusive); any may be empty."""

    months: frozenset[int]
    years: frozenset[int]
    spans: tuple[Span, ...] = ()
    yearly: tuple[tuple[int, int, int], ...] = ()  # (month, first day, last day), any year
    tz: tzinfo = timezone.utc  # whose days and months these are

    def matches(self, timestamp: float) -> bool:
        """Whether a message recorded at ``timestamp`` (epoch seconds, read in ``tz``)
        falls in one of the spans, or in a named month of a named year (an unnamed
        part matches any)."""
        if any(start <= timestamp < end for start, end in self.spans):
            return True
        moment = datetime.fromtimestamp(timestamp, tz=self.tz)
        if any(m == moment.month and a <= moment.day <= b for m, a, b in self.yearly):
            return True
        if not self.months and not self.years:
            return False
        return (not self.months or moment.month in self.months) and (
            not self.years or moment.year in self.years
        )

    def ranges(self, now: float) -> tuple[Span, ...]:
        """The times the cue covers as spans ``(start, end)``, in time order, for a
        store to list the messages recorded then: its spans, each named month of each
        named year; a month named without a year, or a week of a month, is taken in
        each of the :data:`YEARS_BACK` years up to ``now``'s (in ``tz``)."""
        spans = list(self.spans)
        this_year = datetime.fromtimestamp(now, tz=self.tz).year
        every_year = range(this_year - YEARS_BACK, this_year + 1)
        if self.months or self.years:
            for year in sorted(self.years) or every_year:
                for month in sorted(self.months) or range(1, 13):
                    first = month_start(year, month, self.tz)
                    spans.append(span(first, first + month_length(first)))
        for month, first_day, last_day in self.yearly:  # any year, as :meth:`matches` reads it
            for year in every_year:
                first = month_start(year, month, self.tz)
                last = min(first + timedelta(days=last_day - 1), first + month_length(first) - DAY)
                spans.append(span(first + timedelta(days=first_day - 1), last + DAY))
        return _merged(spans)


def _merged(spans: list[Span]) -> tuple[Span, ...]:
    """``spans`` sorted, with overlapping or touching ones joined."""
    out: list[Span] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return tuple(out)


def date_cue(query: str, now: float | None = None, tz: tzinfo = timezone.utc) -> DateCue | None:
    """The month names, years and time phrases in ``query`` (phrases like
    "yesterday" read at ``now``, UNIX seconds; default the current time; days and
    months those of ``tz``, default UTC), or None when it has none."""
    # A named day ("on 8 May 2023") is its own cue: its month and year are not another.
    reading = read_times(query, time.time() if now is None else now, tz)
    months = frozenset(
        MONTHS.index(a or b) + 1 for a, b in _MONTH.findall(reading.rest)
    )
    years = frozenset(int(y) for y in _YEAR.findall(reading.rest))
    if not (months or years or reading.spans or reading.yearly):
        return None
    return DateCue(months, years, reading.spans, reading.yearly, tz)


__all__ = [
    "MONTHS", "DateCue", "asks_about_replies", "date_cue", "named_participant", "time_order", "without_names",
]
