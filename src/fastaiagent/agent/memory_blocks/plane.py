"""PlaneFactBlock: curated facts read from a connected plane.

Read-only and degradable: no connection (none passed as ``plane=`` and none
made the default by ``connect()``), or refused (401/403/404), means no
facts and a normal run; a plane that is down (unreachable, timing out, 429,
502/503/504 or a garbled answer) means the facts last fetched for the same
question and a shared pause before anyone tries again.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import httpx

from fastaiagent import _validate as check
from fastaiagent import trace
from fastaiagent.agent.memory_blocks import framing
from fastaiagent.agent.memory_blocks.base import MemoryBlock
from fastaiagent.llm.message import Message, SystemMessage
from fastaiagent.plane import client as plane
from fastaiagent.plane.client import PlaneConnection, check_connection
from fastaiagent.plane.protocol import (
    FACTS_PATH,
    MAX_FACTS_LIMIT,
    PlaneDenied,
    PlaneFact,
    PlaneUnavailable,
    dedupe,
    parse_facts,
    parse_retry_after,
)

logger = logging.getLogger("fastaiagent.memory.plane")

MIN_PAUSE_SECONDS = 1.0  # even "Retry-After: 0" must not turn into a request per turn
DENIED_STATUSES = (401, 403, 404)
CACHED_QUESTIONS = 256  # one block may serve many users (Memory shares it)
HEADING = "Curated facts:"


@dataclass
class _Cached:
    """One read, kept under (target, question sent or None)."""

    facts: list[PlaneFact]
    deduped: int
    renders: int = 0


class PlaneFactBlock(MemoryBlock):
    """Injects the curated facts a connected plane serves for ``agent_id``.

    Args:
        agent_id: the agent's id on the plane (required).
        category: only facts of this category.
        max_facts: at most this many facts per turn (1..200).
        query_conditioned: send the user's question so the plane ranks facts
            by relevance (never sent when ``FASTAIAGENT_TRACE_PAYLOADS=0``).
        score_threshold: minimum similarity for query-conditioned reads.
        refresh_every: re-read the plane every N renders of the same question;
            a new question always re-reads (outside a back-off).
        plane: the :class:`~fastaiagent.plane.PlaneConnection` to read; None
            (default) reads the process's default, set by ``fastaiagent.connect()``
            (looked up at each read, so connecting later is seen).

    ``retry_after_seconds`` is the pause after an outage when the plane sends
    no Retry-After; ``max_retry_after_seconds`` caps any pause;
    ``denied_retry_seconds`` is how long a 401/403/404 is believed.
    """

    name = "plane_facts"
    retry_after_seconds: float = 30.0
    max_retry_after_seconds: float = 600.0
    denied_retry_seconds: float = 300.0

    def __init__(
        self,
        agent_id: str,
        category: str | None = None,
        max_facts: int = 50,
        query_conditioned: bool = True,
        score_threshold: float = 0.0,
        refresh_every: int = 1,
        *,
        name: str = "plane_facts",
        plane: PlaneConnection | None = None,
    ) -> None:
        # agent_id is the agent's id on the plane; it has no default.
        self.agent_id = check.identifier("agent_id", check.text("agent_id", agent_id).strip())
        self.category = None if category is None else check.text("category", category)
        self.max_facts = check.integer("max_facts", max_facts, minimum=1, maximum=MAX_FACTS_LIMIT)
        self.query_conditioned = check.boolean("query_conditioned", query_conditioned)
        self.score_threshold = check.fraction("score_threshold", score_threshold)
        self.refresh_every = check.integer("refresh_every", refresh_every, minimum=1)
        self.name = check.text("name", name)
        self.plane = check_connection(plane)
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, str | None], _Cached] = OrderedDict()

    def __repr__(self) -> str:
        return f"PlaneFactBlock(agent_id={self.agent_id!r}, category={self.category!r})"

    # -- reading -----------------------------------------------------------------

    def render(self, query: str) -> list[Message]:
        return self._messages(self.facts(query))

    def facts(self, query: str) -> list[PlaneFact]:
        """The facts this turn injects for ``query`` (what :meth:`render` formats)."""
        conn = plane.resolve(self.plane)
        if conn is None:
            trace.annotate({"memory.plane.status": "not_connected"})
            return []
        question = self._question(query)
        cached = self._from_cache(conn.target, question, fresh_only=True)
        if cached is not None:
            return self._serve(cached, "cached")
        key = (conn.target, self.agent_id)
        registry = plane.backoff()
        gate = registry.gate(key)
        if gate == plane.DENIED:
            trace.annotate({"memory.plane.status": "denied"})
            return []
        if gate == plane.PAUSED:
            return self._serve(self._from_cache(conn.target, question), "paused")
        if gate == plane.FETCH:
            return self._read(conn, key, question)
        try:
            return self._read(conn, key, question)
        finally:
            registry.release(key)  # a no-op unless the probe ended without a verdict

    def _read(
        self, conn: plane.PlaneConnection, key: tuple[str, str], question: str | None
    ) -> list[PlaneFact]:
        registry = plane.backoff()
        try:
            fetched = self._fetch(conn, question, registry.wall_clock())
        except PlaneDenied as exc:
            if registry.denied(key, self.denied_retry_seconds, str(exc)):
                logger.warning(
                    "plane %s answered %s for agent %r: no curated facts injected; "
                    "asking again in %.0f s",
                    conn.target, exc, self.agent_id, self.denied_retry_seconds,
                )
            self.clear()
            trace.annotate({"memory.plane.status": "denied"})
            return []
        except PlaneUnavailable as exc:
            pause = self._pause(exc.retry_after)
            if registry.failed(key, pause, exc.reason):
                logger.warning(
                    "plane %s unavailable for agent %r (%s): serving the last facts, "
                    "retrying in %.0f s",
                    conn.target, self.agent_id, exc.reason, pause,
                )
            else:
                logger.debug("plane %s still unavailable (%s)", conn.target, exc.reason)
            return self._serve(self._from_cache(conn.target, question), "unavailable")
        previous = registry.succeeded(key)
        if previous == plane.PAUSED:
            logger.info("plane %s is back for agent %r", conn.target, self.agent_id)
        kept, dropped = dedupe(fetched)
        entry = _Cached(kept[: self.max_facts], dropped)
        with self._lock:
            self._cache[(conn.target, question)] = entry
            self._cache.move_to_end((conn.target, question))
            while len(self._cache) > CACHED_QUESTIONS:
                self._cache.popitem(last=False)
        return self._serve(entry, "fetched")

    def _fetch(
        self, conn: plane.PlaneConnection, question: str | None, now: float
    ) -> list[PlaneFact]:
        params: dict[str, Any] = {"agent_id": self.agent_id, "max": self.max_facts}
        if self.category is not None:
            params["category"] = self.category
        if question is not None:
            params["query"] = question
            params["score_threshold"] = self.score_threshold
        try:
            response = plane.get(conn, FACTS_PATH, params)
        except httpx.TimeoutException as exc:
            raise PlaneUnavailable(f"timeout: {exc}") from exc
        except httpx.HTTPError as exc:  # refused, reset, DNS, oversized...
            raise PlaneUnavailable(f"unreachable: {type(exc).__name__}: {exc}") from exc
        status = response.status_code
        if status in DENIED_STATUSES:
            raise PlaneDenied(str(status))
        if status != 200:
            # 429 / 502 / 503 / 504 are the documented outage answers; any
            # other surprise is treated the same way rather than hammered.
            retry = parse_retry_after(response.headers.get("retry-after"), now)
            raise PlaneUnavailable(f"HTTP {status}", retry)
        try:
            facts = parse_facts(response.body)
        except ValueError as exc:
            raise PlaneUnavailable(f"malformed answer: {exc}") from exc
        if question is not None and self.score_threshold > 0:
            facts = [f for f in facts if f.score is None or f.score >= self.score_threshold]
        return facts

    def _pause(self, retry_after: float | None) -> float:
        pause = self.retry_after_seconds if retry_after is None else retry_after
        return min(max(pause, MIN_PAUSE_SECONDS), self.max_retry_after_seconds)

    def _question(self, query: str) -> str | None:
        if not self.query_conditioned or not trace.payloads_enabled():
            return None
        query = (query or "").strip()
        return query or None

    def _from_cache(
        self, target: str, question: str | None, *, fresh_only: bool = False
    ) -> _Cached | None:
        """The cached read for this question (never another question's)."""
        with self._lock:
            cached = self._cache.get((target, question))
            if cached is None:
                return None
            if fresh_only and cached.renders >= self.refresh_every:
                return None
            return cached

    def _serve(self, cached: _Cached | None, status: str) -> list[PlaneFact]:
        trace.annotate({"memory.plane.status": status})
        if cached is None:
            return []
        with self._lock:
            cached.renders += 1
        trace.annotate({"memory.deduped_count": cached.deduped})
        return list(cached.facts)

    @staticmethod
    def _messages(facts: list[PlaneFact]) -> list[Message]:
        if not facts:
            return []
        # Quoted like local facts: curated, but still data, never instructions.
        texts = [f.fact for f in facts]
        return [SystemMessage(framing.notes_section(HEADING, texts, [framing.PLANE] * len(texts)))]

    # -- state ---------------------------------------------------------------

    def clear(self) -> None:
        """Drop the cached reads; the plane's facts themselves are untouched."""
        with self._lock:
            self._cache.clear()

    def isolated_copy(self) -> PlaneFactBlock:
        """A fresh block with the same settings (read-only, so safe to copy)."""
        copy = type(self).__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy._lock = threading.Lock()
        copy._cache = OrderedDict()
        return copy

    def __deepcopy__(self, memo: dict[int, Any]) -> PlaneFactBlock:
        return self.isolated_copy()
