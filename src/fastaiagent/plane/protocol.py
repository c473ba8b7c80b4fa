"""The plane's read protocol: the facts it serves, its refusals and pauses.

What a reader needs to understand a plane's answer, independent of who reads
it: the served fact record, ``Retry-After`` parsing, body parsing with a size
and shape check, and dedupe of repeated texts.
"""

from __future__ import annotations

import email.utils
import json
import math
from dataclasses import dataclass
from typing import Any

from fastaiagent._io import decode_json
from fastaiagent.errors import FastAIAgentError, InvalidValueError
from fastaiagent.facts.scoping import normalize_text

# The one read endpoint, and the most facts one answer may hold (``?max=``).
FACTS_PATH = "/public/v1/memory/facts"
MAX_FACTS_LIMIT = 200


@dataclass(frozen=True)
class PlaneFact:
    """One curated fact as the plane served it."""

    fact: str
    id: Any = None
    category: str | None = None
    importance: float | None = None
    score: float | None = None


class PlaneUnavailable(FastAIAgentError):
    """The plane could not answer usefully now (down, busy or garbled)."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class PlaneDenied(FastAIAgentError):
    """The plane has no facts for this agent and key (401/403/404)."""


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds a Retry-After header asks for (delay-seconds or HTTP-date), or None.

    ``now`` is the current UNIX time, used for the HTTP-date form.
    """
    if not value or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - now  # naive dates are read as UTC by parsedate
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def parse_facts(body: bytes) -> list[PlaneFact]:
    """The facts of a ``{"facts": [...]}`` answer, in the plane's order.

    Raises ValueError for an answer that is not that shape; single malformed
    entries are skipped.
    """
    try:
        payload = decode_json(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidValueError(f"not JSON: {exc}") from exc
    if not isinstance(payload, dict) or not isinstance(payload.get("facts"), list):
        raise InvalidValueError('expected an object with a "facts" list')
    facts = []
    for item in payload["facts"]:
        if not isinstance(item, dict):
            continue
        text = item.get("fact")
        if not isinstance(text, str) or not text.strip():
            continue
        category = item.get("category")
        facts.append(
            PlaneFact(
                fact=text.strip(),
                id=item.get("id"),
                category=category if isinstance(category, str) else None,
                importance=_number(item.get("importance")),
                score=_number(item.get("score")),
            )
        )
    return facts


def dedupe(facts: list[PlaneFact]) -> tuple[list[PlaneFact], int]:
    """Drop repeats by normalised text, keeping the first; returns (kept, dropped)."""
    seen: set[str] = set()
    kept = []
    for fact in facts:
        key = normalize_text(fact.fact)
        if key in seen:
            continue
        seen.add(key)
        kept.append(fact)
    return kept, len(facts) - len(kept)
