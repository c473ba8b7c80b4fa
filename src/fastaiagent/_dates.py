"""Calendar pieces shared by the readers of dates in text (UTC days, English names).

``learn.stated_time`` reads when a learned fact holds ("until Friday");
``recall.dates`` reads when a recall query points ("two weeks before May 8").
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo

DAY = timedelta(days=1)
MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def month_pattern(group: str = "month") -> str:
    """A month name or its three-letter form (optional dot), in group ``group``."""
    return rf"(?P<{group}>" + "|".join(m[:3] + r"(?:" + m[3:] + r")?" for m in MONTHS) + r")\.?"


def year_pattern(group: str = "year") -> str:
    """A year from 1900 to 2099, in group ``group``."""
    return rf"(?P<{group}>(?:19|20)\d{{2}})"


def midnight(moment: datetime) -> datetime:
    """The start of ``moment``'s day."""
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def month_number(name: str) -> int:
    """1-12 for a month name or its three-letter form, any case."""
    return next(i for i, m in enumerate(MONTHS, start=1) if m.startswith(name[:3].lower()))


def month_start(year: int, month: int, tz: tzinfo = timezone.utc) -> datetime:
    """00:00 on the first of ``month`` of ``year``, in ``tz`` (default UTC)."""
    return datetime(year, month, 1, tzinfo=tz)


def month_length(first: datetime) -> timedelta:
    """How long the month starting at ``first`` lasts."""
    if first.month == 12:
        return first.replace(year=first.year + 1, month=1) - first
    return first.replace(month=first.month + 1) - first


__all__ = [
    "DAY",
    "MONTHS",
    "WEEKDAYS",
    "midnight",
    "month_length",
    "month_number",
    "month_pattern",
    "month_start",
    "year_pattern",
]
