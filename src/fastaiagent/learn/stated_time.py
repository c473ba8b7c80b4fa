"""When a learned fact holds, as the conversation states it: "until Friday", "since 2024".

Extraction keeps such phrases in the fact's text ("Has a 20% discount until
Friday"); :func:`stated_validity` reads them against a given "now", so a test
with an injected clock gets the same answer every time. Days are UTC days; an
end is exclusive, so "until Friday" holds through Friday and has expired on
Saturday at 00:00 UTC. Text with no recognised phrase has no stated validity.

Recognised ends: ``until`` / ``till`` / ``through`` a weekday, ``today``,
``tonight``, ``tomorrow``, ``the end of the week|month|year``, ``next week``,
``<Month> <day>[, <year>]``, ``<day> <Month> [<year>]``, an ISO date, a year; and
``for <n> hours|days|weeks|months``. Recognised starts: ``since`` / ``from`` /
``starting`` a year, ``<Month> [<year>]``, an ISO date or a weekday.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from fastaiagent import _dates
from fastaiagent._dates import DAY, WEEKDAYS, midnight, month_length, month_number, month_start

__all__ = ["stated_validity"]

_MONTH = _dates.month_pattern()
_WEEKDAY = r"(?P<weekday>" + "|".join(WEEKDAYS) + r")"
_ISO = r"(?P<iso>\d{4}-\d{2}-\d{2})"
_YEAR = _dates.year_pattern()
_UNTIL = re.compile(r"\b(?:until|till|til|through|thru|up to)\s+(?:the\s+)?(?:next\s+|this\s+)?(?P<what>.+)", re.I)
_SINCE = re.compile(r"\b(?:since|from|starting(?:\s+on|\s+in)?|as of)\s+(?:the\s+)?(?P<what>.+)", re.I)
_FOR = re.compile(r"\bfor\s+(?:the\s+next\s+)?(?P<n>\d+|a|an|one|two|three)\s+(?P<unit>hour|day|week|month)s?\b", re.I)
_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3}


def _date_of(text: str, now: datetime) -> tuple[datetime, timedelta] | None:
    """The first day a phrase names and how long it lasts (a day, a month, a year)."""
    text = text.strip().lower()
    if match := re.match(_ISO, text):
        return datetime.fromisoformat(match["iso"]).replace(tzinfo=timezone.utc), DAY
    if match := re.match(rf"{_MONTH}\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?(?:,?\s+{_YEAR})?\b", text):
        return _day_in(now, match["month"], int(match["day"]), match["year"]), DAY
    if match := re.match(rf"(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?\b", text):
        return _day_in(now, match["month"], int(match["day"]), match["year"]), DAY
    if match := re.match(rf"{_MONTH}(?:\s+{_YEAR})?\b", text):
        year = int(match["year"]) if match["year"] else now.year
        first = month_start(year, month_number(match["month"]))
        return first, month_length(first)
    if match := re.match(rf"{_YEAR}\b", text):
        first = month_start(int(match["year"]), 1)
        return first, first.replace(year=first.year + 1) - first
    return None


def _day_in(now: datetime, month: str, day: int, year: str | None) -> datetime:
    when = datetime(int(year) if year else now.year, month_number(month), day, tzinfo=timezone.utc)
    if year is None and when < midnight(now):
        when = when.replace(year=when.year + 1)  # "until March 3" said in April: next March
    return when


def _relative_end(text: str, now: datetime) -> datetime | None:
    """The exclusive end of "until <relative day or period>"."""
    text, today = text.strip().lower(), midnight(now)
    if match := re.match(_WEEKDAY, text):
        ahead = (WEEKDAYS.index(match["weekday"]) - now.weekday()) % 7
        return today + (ahead + 1) * DAY
    if re.match(r"(?:today|tonight|this evening)\b", text):
        return today + DAY
    if re.match(r"tomorrow\b", text):
        return today + 2 * DAY
    if re.match(r"(?:end of (?:the |this )?week|week'?s end|weekend)\b", text):
        return today + (7 - now.weekday()) * DAY
    if re.match(r"week\b", text):  # "until next week": through this week
        return today + (7 - now.weekday()) * DAY
    if re.match(r"end of (?:the |this )?month\b", text):
        first = today.replace(day=1)
        return first + month_length(first)
    if re.match(r"end of (?:the |this )?year\b", text):
        return today.replace(month=1, day=1, year=today.year + 1)
    return None


def _stated_end(text: str, now: datetime) -> datetime | None:
    if match := _UNTIL.search(text):
        what = match["what"]
        if (end := _relative_end(what, now)) is not None:
            return end
        if (named := _date_of(what, now)) is not None:
            first, length = named
            return first + length
    if match := _FOR.search(text):
        count = _WORDS.get(match["n"].lower()) or int(match["n"])
        unit = match["unit"].lower()
        days = {"hour": 1 / 24, "day": 1, "week": 7, "month": 30}[unit]
        return now + timedelta(days=count * days)
    return None


def _stated_start(text: str, now: datetime) -> datetime | None:
    match = _SINCE.search(text)
    if match is None:
        return None
    what = match["what"].strip().lower()
    if weekday := re.match(_WEEKDAY, what):
        ahead = (WEEKDAYS.index(weekday["weekday"]) - now.weekday()) % 7
        since = "since" in match.group(0).lower()
        return midnight(now) + (ahead - 7 if since and ahead else ahead) * DAY
    named = _date_of(what, now)
    return None if named is None else named[0]


def stated_validity(text: str, now: float) -> tuple[float | None, float | None]:
    """``(valid_from, valid_to)`` in UNIX seconds as ``text`` states them at ``now``
    (UNIX seconds); None where it states nothing. An end not after the start is
    dropped (the phrase was misread)."""
    moment = datetime.fromtimestamp(now, tz=timezone.utc)
    start, end = _stated_start(text, moment), _stated_end(text, moment)
    valid_from = None if start is None else start.timestamp()
    valid_to = None if end is None else end.timestamp()
    if valid_from is not None and valid_to is not None and valid_to <= valid_from:
        valid_to = None
    if valid_to is not None and valid_to <= now and valid_from is None:
        valid_to = None  # "until 2020" said today is history, not an end to apply
    return valid_from, valid_to
