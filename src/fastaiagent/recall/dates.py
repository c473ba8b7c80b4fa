"""When a recall query points in time: a month, a year, "two weeks before 11 August 2023", "yesterday".

:func:`date_cue` reads a query against ``now`` (when it is asked, UNIX seconds)
and returns a :class:`DateCue`: the months and years it names and the spans of
time (days of a time zone, UTC unless one is given) in which the messages the
query is about were probably said. The spans are generous on purpose: a message
about an event is often said days later ("we adopted her two weeks ago").

- a month (capitalised: "may" is a verb) or a year, where the query says when:
  after a word of time ("in May", "since 2019", :data:`~.words.WORDS` ``when``)
  or beside another part of a date ("May 2023"); "the 2024 release" is content;
- a day with its year, "on 8 May 2023", "August 11, 2023": that day and the week after;
- an offset from such a day, "<n> days|weeks|months|years before|after <day>",
  "the week|weekend|day before <day>": from the event to a week after the day
  it is counted from;
- an offset from now, "<n> days|weeks|months|years ago": around that moment;
- ``yesterday``, ``today``, ``last|this week``, ``last weekend``,
  ``last|this month|year``, ``last <Month>``;
- "the first|second|third|fourth|last week of <Month> [<year>]": that week
  and the one after (in any year when none is named).

The phrases are English (docs/semantic.md lists the languages recall reads).
"""

from __future__ import annotations

import re
import time
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
from fastaiagent.recall.weights import YEARS_BACK
from fastaiagent.recall.words import alternatives

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




MONTH_NAMES = tuple(m.capitalize() for m in MONTHS)
_WHEN = rf"(?:\b(?:{alternatives('when')})\s+(?:(?:early|late|mid)[\s-]+)?)"
_MONTH_NAME = r"(" + "|".join(MONTH_NAMES) + r")"  # capitalised: "may" is a verb
_MONTH = re.compile(
    rf"(?:{_WHEN}{_MONTH_NAME}\b|\b{_MONTH_NAME}(?=\s+\d{{1,2}}\b|,?\s+(?:19|20)\d\d\b))"
)
_YEAR_AFTER = (  # what a year beside it completes: a month (and day), a season
    rf"\b(?:{'|'.join(MONTH_NAMES)})(?:\s+\d{{1,2}})?,?\s*|\b(?:{alternatives('season')})\s+"
)
_YEAR = re.compile(rf"(?:{_WHEN}|{_YEAR_AFTER})((?:19|20)\d\d)\b(?![-\w])")


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
    months = frozenset(MONTH_NAMES.index(a or b) + 1 for a, b in _MONTH.findall(reading.rest))
    years = frozenset(int(y) for y in _YEAR.findall(reading.rest))
    if not (months or years or reading.spans or reading.yearly):
        return None
    return DateCue(months, years, reading.spans, reading.yearly, tz)


__all__ = ["MONTH_NAMES", "DateCue", "Span", "TimeReading", "date_cue", "read_times", "span", "time_spans"]
