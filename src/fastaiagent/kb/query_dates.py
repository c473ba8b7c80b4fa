"""When a recall query points in time: "two weeks before 11 August 2023", "yesterday".

:func:`time_spans` reads the phrases below against ``now`` (when the query is
asked, UNIX seconds) and returns the spans of time (days of a time zone, UTC
unless one is given) in which the messages
the query is about were probably said. The spans are generous on purpose: a
message about an event is often said days later ("we adopted her two weeks ago").

- a day with its year, "on 8 May 2023", "August 11, 2023": that day and the week after;
- an offset from such a day, "<n> days|weeks|months|years before|after <day>",
  "the week|weekend|day before <day>": from the event to a week after the day
  it is counted from;
- an offset from now, "<n> days|weeks|months|years ago": around that moment;
- ``yesterday``, ``today``, ``last|this week``, ``last weekend``,
  ``last|this month|year``, ``last <Month>``;
- "the first|second|third|fourth|last week of <Month> [<year>]": that week
  and the one after (in any year when none is named).

Month names and years on their own are :func:`~fastaiagent.kb.query_cues.date_cue`'s
month/year cue. Phrases are English.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo

from fastaiagent._dates import (
    DAY,
    MONTHS,
    midnight,
    month_length,
    month_number,
    month_pattern,
    month_start,
    year_pattern,
)

Span = tuple[float, float]
"""``(start, end)`` in UNIX seconds, end exclusive."""

WEEK = 7 * DAY
_UNIT_DAYS = {"day": 1.0, "week": 7.0, "weekend": 7.0, "month": 30.44, "year": 365.25}
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "few": 3, "couple": 2, "couple of": 2,
    "the": 1, "last": 1,
}  # fmt: skip
_N = r"(?P<n>\d{1,3}|a\s+couple\s+of|couple\s+of|a\s+few|few|" + "|".join(_NUMBERS) + ")"
_UNIT = r"(?P<unit>day|weekend|week|month|year)s?"
_SUFFIX = r"(?:st|nd|rd|th)?"
_DAY_DATES = (
    re.compile(rf"\b{month_pattern()}\s+(?P<day>\d{{1,2}}){_SUFFIX},?\s+{year_pattern()}\b", re.I),
    re.compile(rf"\b(?P<day>\d{{1,2}}){_SUFFIX}\s+(?:of\s+)?{month_pattern()},?\s+{year_pattern()}\b", re.I),
)
_OFFSET = re.compile(rf"\b{_N}\s+{_UNIT}\s+(?P<way>before|after|prior\s+to)\s+(?:the\s+)?(?:on\s+)?$", re.I)
_OFFSET_REACH = 80  # characters: "a couple of weeks prior to the on " is 34
_WEEK_OF = re.compile(
    rf"\b(?P<nth>first|second|third|fourth|last|1st|2nd|3rd|4th)\s+week\s+of\s+{month_pattern()}"
    rf"(?:,?\s+{year_pattern()})?\b",
    re.I,
)
_NTH = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4, "4th": 4}
_AGO = re.compile(rf"\b{_N}\s+{_UNIT}\s+ago\b", re.I)
_LAST_MONTH_NAME = re.compile(r"\blast\s+(" + "|".join(m.capitalize() for m in MONTHS) + r")\b")
_NAMED = re.compile(
    r"\b(?P<what>yesterday|today|tonight|this\s+morning|(?:last|this)\s+(?:week|weekend|month|year))"
    r"\b(?!\s+(?:before|after|prior|of)\b)",  # "last week before <day>", "last week of May"
    re.I,
)


def _count(word: str) -> int:
    word = " ".join(word.lower().split()).removeprefix("a ")
    return int(word) if word.isdigit() else _NUMBERS.get(word, 1)


def span(start: datetime, end: datetime) -> Span:
    """``(start, end)`` as UNIX seconds."""
    return start.timestamp(), end.timestamp()


@dataclass(frozen=True)
class TimeReading:
    """What :func:`read_times` found in a query."""

    spans: tuple[Span, ...]
    """Spans of time, ``(start, end)`` UNIX seconds."""
    yearly: tuple[tuple[int, int, int], ...]
    """``(month, first day, last day)`` in any year: "the second week of November"."""
    rest: str
    """The query without the phrases read: its month names and years are still a cue."""


def _day_spans(query: str, taken: list[tuple[int, int]], tz: tzinfo) -> list[Span]:
    """Spans of days with a year, and of offsets counted from them."""
    spans: list[Span] = []
    for pattern in _DAY_DATES:
        for match in pattern.finditer(query):
            try:
                day = datetime(
                    int(match["year"]), month_number(match["month"]), int(match["day"]),
                    tzinfo=tz,
                )  # fmt: skip
            except ValueError:  # "31 February 2023": no such day, no cue
                continue
            taken.append(match.span())
            # Only the text just before the day can hold its offset: searching the
            # whole prefix again for each day made a long query quadratic.
            offset = _OFFSET.search(query, max(0, match.start() - _OFFSET_REACH), match.start())
            if offset is None:
                spans.append(span(day, day + WEEK + DAY))
                continue
            length = timedelta(days=_count(offset["n"]) * _UNIT_DAYS[offset["unit"].lower()])
            if offset["way"].lower() == "after":
                spans.append(span(day, day + length + WEEK + DAY))
            else:
                spans.append(span(day - length - DAY, day + WEEK + DAY))
    return spans


def _weeks_of_months(
    query: str, taken: list[tuple[int, int]], tz: tzinfo
) -> tuple[list[Span], list[tuple[int, int, int]]]:
    """"The second week of November [2023]": that week and the one after."""
    spans: list[Span] = []
    yearly: list[tuple[int, int, int]] = []
    for match in _WEEK_OF.finditer(query):
        taken.append(match.span())
        month, nth = month_number(match["month"]), match["nth"].lower()
        first = 22 if nth == "last" else 7 * (_NTH[nth] - 1) + 1
        if match["year"] is None:
            yearly.append((month, first, min(31, first + 13)))
            continue
        start = month_start(int(match["year"]), month, tz)
        if nth == "last":
            start += month_length(start) - WEEK
        else:
            start += (first - 1) * DAY
        spans.append(span(start, start + 2 * WEEK))
    return spans, yearly


def _calendar(what: str, now: datetime) -> Span:
    """The span of a named day or period relative to ``now``."""
    today, what, tz = midnight(now), " ".join(what.lower().split()), now.tzinfo or timezone.utc
    monday = today - today.weekday() * DAY
    first = month_start(today.year, today.month, tz)
    previous = month_start(today.year - (today.month == 1), (today.month - 2) % 12 + 1, tz)
    year = month_start(today.year, 1, tz)
    spans = {
        "yesterday": (today - DAY, today),
        "last week": (monday - WEEK, monday),
        "last weekend": (monday - WEEK - 2 * DAY, monday),
        "this week": (monday, today + DAY),
        "last month": (previous, first),
        "this month": (first, today + DAY),
        "last year": (year.replace(year=year.year - 1), year),
        "this year": (year, today + DAY),
    }
    start, end = spans.get(what, (today, today + DAY))  # today, tonight, this morning
    return span(start, end)


def _relative(query: str, now: datetime) -> list[Span]:
    """Spans of phrases counted from ``now``."""
    spans = [_calendar(match["what"], now) for match in _NAMED.finditer(query)]
    for match in _AGO.finditer(query):
        length = timedelta(days=_count(match["n"]) * _UNIT_DAYS[match["unit"].lower()])
        slack = max(DAY, length / 4)
        spans.append(span(now - length - slack, now - length + slack))
    for match in _LAST_MONTH_NAME.finditer(query):
        month = month_number(match[1])
        start = month_start(now.year - (month >= now.month), month, now.tzinfo or timezone.utc)
        spans.append(span(start, start + month_length(start)))
    return spans


def read_times(query: str, now: float, tz: tzinfo = timezone.utc) -> TimeReading:
    """The times ``query`` points to, phrases like "yesterday" read at ``now`` (UNIX
    seconds); days and months are those of the time zone ``tz`` (default UTC)."""
    taken: list[tuple[int, int]] = []
    spans = _day_spans(query, taken, tz)
    weeks, yearly = _weeks_of_months(query, taken, tz)
    spans += weeks + _relative(query, datetime.fromtimestamp(now, tz=tz))
    return TimeReading(tuple(spans), tuple(yearly), _without(query, taken))


def _without(query: str, taken: list[tuple[int, int]]) -> str:
    """``query`` with each taken span replaced by a space (spans may overlap), in one pass."""
    pieces, kept_from = [], 0
    for start, end in sorted(taken):
        if end > kept_from:  # a span inside an earlier one is gone already
            pieces += [query[kept_from:start], " "]
            kept_from = end
    pieces.append(query[kept_from:])
    return "".join(pieces)


def time_spans(query: str, now: float, tz: tzinfo = timezone.utc) -> list[Span]:
    """The spans of time ``query`` points to, read at ``now`` (UNIX seconds) in ``tz``; [] for none."""
    return list(read_times(query, now, tz).spans)


__all__ = ["Span", "TimeReading", "read_times", "span", "time_spans"]
