"""FactExtractionBlock: an LLM pulls durable facts out of messages as they are stored."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastaiagent import trace
from fastaiagent._throttle import LogThrottle
from fastaiagent._validate import boolean, duration, fraction, integer, one_of, positive_int
from fastaiagent._validate import text as check_text
from fastaiagent.agent.memory_blocks import framing
from fastaiagent.agent.memory_blocks.base import MemoryBlock, check_llm, check_roles
from fastaiagent.agent.memory_blocks.fact_policy import (
    FLAG,
    FLAGGED_KEY,
    KEEP,
    FactPolicy,
    check_policy,
    judge,
)
from fastaiagent.errors import (
    InvalidTypeError,
    InvalidValueError,
    MemoryIsolationError,
    StoreUnavailableError,
    is_configuration_error,
)
from fastaiagent.facts.fact import SCOPES, SOURCE_CONVERSATION, Fact
from fastaiagent.facts.scoping import WILDCARD, normalize_text
from fastaiagent.facts.store import FactStore
from fastaiagent.facts.validity import Clock, check_clock, read_clock
from fastaiagent.learn.extractor import (
    MAX_KNOWN_FACTS,
    ExtractedFact,
    aextract_facts,
    extract_facts,
)
from fastaiagent.learn.stated_time import stated_validity
from fastaiagent.llm.base import BaseLLM
from fastaiagent.llm.message import Message, SystemMessage
from fastaiagent.recall.entity_store import read_facts

_outages = LogThrottle(lambda: OUTAGE_LOG_SECONDS)  # one line per store outage, not per turn
OUTAGE_LOG_SECONDS = 60.0
logger = logging.getLogger("fastaiagent.memory")

HEADING = "Known facts:"


@dataclass(frozen=True)
class KnownFact:
    """A fact the extraction call is shown, so the model can say it was replaced.

    ``store_id`` is set for facts read from the store; only ``learned`` ones
    (written during a run) may be superseded by a newly extracted fact.
    """

    text: str
    store_id: int | None = None
    learned: bool = True


@dataclass(frozen=True)
class _Job:
    text: str
    role: str
    trace_id: str | None


@dataclass
class _Screened:
    """Extracted facts after the fact policy: kept, flagged (stored, not shown), dropped."""

    kept: list[ExtractedFact]
    flagged: list[str]
    dropped: int


def _check_subject(persist: bool, scope: str, scope_id: str, project_id: str) -> None:
    """Check the subject learned facts belong to: a known scope and, when persisting, one
    concrete scope_id to write under."""
    one_of("scope", scope, SCOPES)
    check_text("scope_id", scope_id, allow_empty=True)
    check_text("project_id", project_id, allow_empty=True)
    if persist and not scope_id:
        raise InvalidValueError(
            "FactExtractionBlock(persist=True) needs a scope_id: the subject the "
            "learned facts belong to (e.g. the user id)"
        )
    if persist and WILDCARD in (scope_id, project_id):
        raise InvalidValueError('"*" is a read wildcard and cannot be a scope_id to write under')


class FactExtractionBlock(MemoryBlock):
    """Extracts durable facts with ``llm`` and injects them as "Known facts:" bullets.

    Every ``extract_every``-th message of the ``roles`` it reads is sent to the
    model with the subject's current facts. New facts are kept in order,
    deduplicated by normalised text (case and spacing), at most ``max_facts``
    (the oldest drop). A fact the model says replaces a known one takes its
    place. ``inject=False`` extracts without rendering; injected facts are
    quoted data under a preamble (see ``framing``), never bare text.

    Every extracted fact first goes through ``fact_policy`` (default:
    :func:`~fastaiagent.agent.memory_blocks.fact_policy.default_fact_policy`,
    which drops text that reads as instructions to the assistant): ``keep``
    stores and shows it, ``flag`` stores it with ``metadata["flagged"]`` but
    never shows it (nor lets it replace a fact), ``drop`` discards it.

    With ``persist=True`` each new fact is also written to ``store`` (default:
    the local SQLite store) under ``scope:scope_id`` in ``project_id``, with
    ``confidence``, source "learned" and the run's trace id. A replaced
    run-learned fact is superseded (kept as history), never deleted; then only
    the newest ``max_persisted`` run-learned facts of the subject are kept
    (facts written directly are never touched). Facts about a user (``scope``
    "user") are also read into that user's entity book (names, descriptions:
    :func:`~fastaiagent.recall.entity_store.read_facts`), so recall links them to
    the user's messages. Store errors are logged and
    the run goes on; an LLM error leaves the block as it was.

    A persisted fact holds for ``ttl`` seconds (None: until replaced) unless its
    text states when it holds ("until Friday", "since 2024": see
    :mod:`fastaiagent.learn.stated_time`), read against ``clock`` (a callable
    returning a datetime or UNIX seconds; default the system clock).
    """

    name = "facts"

    def __init__(
        self,
        llm: BaseLLM,
        max_facts: int = 200,
        extract_every: int = 1,
        roles: Sequence[str] = ("user", "assistant"),
        inject: bool = True,
        persist: bool = False,
        scope: str = "user",
        scope_id: str = "",
        project_id: str = "",
        confidence: float = 0.6,
        max_persisted: int | None = 200,
        store: FactStore | None = None,
        *,
        name: str = "facts",
        fact_policy: FactPolicy | None = None,
        ttl: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.llm = check_llm("FactExtractionBlock", llm)
        self.max_facts = integer("max_facts", max_facts, minimum=1)
        self.extract_every = integer("extract_every", extract_every, minimum=1)
        self.roles = check_roles(roles)
        self.inject = boolean("inject", inject)
        self.persist = boolean("persist", persist)
        _check_subject(self.persist, scope, scope_id, project_id)
        self.confidence = fraction("confidence", confidence)
        positive_int("max_persisted", max_persisted, allow_none=True)
        check_text("name", name)
        if store is not None and not callable(getattr(store, "add", None)):
            raise InvalidTypeError(
                f"store must be a FactStore (e.g. SQLiteFactStore()), got {type(store).__name__}"
            )
        self.scope = scope
        self.scope_id = scope_id
        self.project_id = project_id
        self.max_persisted = max_persisted
        self.name = name
        self.fact_policy = check_policy(fact_policy)
        self.ttl = duration("ttl", ttl, allow_none=True)
        check_clock(clock)
        self.clock = clock
        if store is None and self.persist:
            from fastaiagent.facts.sqlite.store import SQLiteFactStore

            store = SQLiteFactStore()  # touches no file until the first write
        self.store = store
        self.facts: list[str] = []
        self.inspected = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        target = f", persist to {self.scope}:{self.scope_id}" if self.persist else ""
        return f"FactExtractionBlock(facts={len(self.facts)}{target})"

    # -- steps of one extraction -------------------------------------------------

    def _begin(self, message: Message) -> _Job | None:
        """Count ``message``; the extraction job due for it, or None."""
        text = (message.content or "").strip()
        if message.role not in self.roles or not text:
            return None
        with self._lock:
            self.inspected += 1
            if self.inspected % self.extract_every:
                return None
        # The trace id is read now, in the run's context, not later in a worker.
        return _Job(text, message.role, trace.current_trace_id())

    def _now(self) -> float:
        return time.time() if self.clock is None else read_clock(self.clock)

    def known_facts(self) -> list[KnownFact]:
        """The subject's current facts, newest first: from the store when persisting."""
        if self.persist and self.store is not None:
            try:
                stored = self.store.list_active(
                    self.scope, self.scope_id, self.project_id, limit=MAX_KNOWN_FACTS, now=self._now()
                )
                return [
                    KnownFact(f.fact, f.id, f.source == SOURCE_CONVERSATION)
                    for f in stored
                    if not (f.metadata and f.metadata.get(FLAGGED_KEY))
                ]
            except StoreUnavailableError:
                raise  # nothing learned could be stored: on_message skips the extraction
            except Exception as exc:
                if is_configuration_error(exc):
                    raise
                logger.warning("FactExtractionBlock: could not read known facts: %s", exc)
        with self._lock:
            return [KnownFact(text) for text in reversed(self.facts[-MAX_KNOWN_FACTS:])]

    def _merge(
        self, known: list[KnownFact], extracted: list[ExtractedFact]
    ) -> list[tuple[str, KnownFact | None]]:
        """Fold extracted facts into the list; the (fact, replaced) pairs to persist."""
        to_write: list[tuple[str, KnownFact | None]] = []
        known_keys = {normalize_text(k.text) for k in known}
        with self._lock:
            keys = {normalize_text(text) for text in self.facts}
            for item in extracted:
                key = normalize_text(item.text)
                old = known[item.replaces] if item.replaces is not None else None
                if old is not None and normalize_text(old.text) == key:
                    old = None  # "replaces itself": nothing changes
                if old is None and key in known_keys:
                    if key not in keys:  # stored earlier (another run): show it, no rewrite
                        self.facts.append(item.text)
                        keys.add(key)
                    continue
                if old is None and key in keys:
                    continue  # already known
                if old is not None:
                    old_key = normalize_text(old.text)
                    self.facts = [t for t in self.facts if normalize_text(t) != old_key]
                    keys.discard(old_key)
                if key not in keys:
                    self.facts.append(item.text)
                    keys.add(key)
                to_write.append((item.text, old))
            if len(self.facts) > self.max_facts:
                del self.facts[: len(self.facts) - self.max_facts]
        return to_write

    def _screen(self, role: str, extracted: list[ExtractedFact]) -> _Screened:
        """Run every extracted fact through the fact policy."""
        source = framing.USER_SAID if role == "user" else f"{role} said"
        screened = _Screened([], [], 0)
        for item in extracted:
            verdict = judge(self.fact_policy, item.text, source)
            if verdict == KEEP:
                screened.kept.append(item)
            elif verdict == FLAG:
                screened.flagged.append(item.text)
            else:
                screened.dropped += 1
        if screened.dropped or screened.flagged:
            logger.info(
                "FactExtractionBlock: the fact policy dropped %d and flagged %d extracted "
                "fact(s) of %s:%s",
                screened.dropped, len(screened.flagged), self.scope, self.scope_id,
            )
        return screened

    def _write(
        self, text: str, old: KnownFact | None, trace_id: str | None, *, flagged: bool = False
    ) -> int | None:
        """Persist one fact (superseding ``old`` when it is a stored learned fact);
        its id, None when it could not be written."""
        assert self.store is not None
        now = self._now()
        valid_from, valid_to = stated_validity(text, now)
        if valid_to is None and self.ttl is not None:
            valid_to = max(now, valid_from or now) + self.ttl
        fact = Fact(
            text,
            scope=self.scope,
            scope_id=self.scope_id,
            project_id=self.project_id,
            confidence=self.confidence,
            source=SOURCE_CONVERSATION,
            source_trace_id=trace_id,
            metadata={FLAGGED_KEY: "fact_policy"} if flagged else {},
            created_at=now,
            valid_from=valid_from,
            valid_to=valid_to,
        )
        if old is not None and old.store_id is not None and old.learned:
            try:
                return self.store.update(fact, old.store_id)
            except Exception as exc:  # e.g. superseded meanwhile: keep the new fact anyway
                if is_configuration_error(exc):
                    raise
                logger.warning(
                    "FactExtractionBlock: could not supersede fact #%s (%s); adding the new "
                    "fact without replacing it",
                    old.store_id,
                    exc,
                )
        try:
            return self.store.add(fact)
        except Exception as exc:
            if is_configuration_error(exc):
                raise
            logger.warning("FactExtractionBlock: could not persist a learned fact: %s", exc)
            return None

    def _persist(
        self,
        to_write: list[tuple[str, KnownFact | None]],
        trace_id: str | None,
        flagged: Sequence[str] = (),
    ) -> int:
        if not self.persist or self.store is None or not (to_write or flagged):
            return 0
        kept = [(self._write(text, old, trace_id), text) for text, old in to_write]
        stored = [(fact_id, text) for fact_id, text in kept if fact_id is not None]
        written = len(stored) + sum(self._write(t, None, trace_id, flagged=True) is not None for t in flagged)
        if stored and self.scope == "user":
            self._feed_entities(stored)
        if written and self.max_persisted is not None:
            try:
                self.store.prune_learned(
                    self.scope, self.scope_id, self.project_id, keep=self.max_persisted
                )
            except Exception as exc:
                if is_configuration_error(exc):
                    raise
                logger.warning("FactExtractionBlock: could not prune learned facts: %s", exc)
        return written

    def _feed_entities(self, stored: list[tuple[int, str]]) -> None:
        """Read the user's new facts (not flagged ones) into their entity book, so
        recall links what the facts name to the messages about it (no LLM call;
        :func:`~fastaiagent.recall.entity_store.read_facts`)."""
        try:
            read_facts(self.store, self.scope_id, stored, self.project_id)
        except Exception as exc:  # the facts are stored; recall just links less
            if is_configuration_error(exc):
                raise
            logger.warning("FactExtractionBlock: could not read learned facts into the entity book: %s", exc)

    def _apply(self, job: _Job, known: list[KnownFact], extracted: list[ExtractedFact]) -> None:
        screened = self._screen(job.role, extracted)
        to_write = self._merge(known, screened.kept)
        detail: dict[str, int] = {"facts_extracted": len(to_write)}
        if screened.dropped or screened.flagged:
            detail.update(dropped_by_policy=screened.dropped, flagged=len(screened.flagged))
        if self.persist:
            detail["persisted"] = self._persist(to_write, job.trace_id, screened.flagged)
        trace.annotate({"memory.action": "extracted_facts", "memory.detail": json.dumps(detail)})

    @staticmethod
    def _failed(exc: Exception) -> None:
        logger.warning("FactExtractionBlock: the extraction LLM failed; facts kept: %s", exc)
        trace.annotate({"memory.action": "failed", "memory.error": str(exc)[:200]})

    # -- MemoryBlock -------------------------------------------------------------

    def _store_down(self, exc: StoreUnavailableError) -> None:
        _outages.warn(
            logger, (type(self.store).__name__,),
            "FactExtractionBlock: the fact store is unavailable; extraction skipped: %s", exc,
        )
        trace.annotate({"memory.action": "skipped", "memory.error": str(exc)[:200]})

    def on_message(self, message: Message) -> None:
        job = self._begin(message)
        if job is None:
            trace.annotate({"memory.action": "noop"})
            return
        try:
            known = self.known_facts()
        except StoreUnavailableError as exc:
            self._store_down(exc)
            return
        try:
            extracted = extract_facts(
                self.llm, job.text, role=job.role, known_facts=[k.text for k in known]
            )
        except Exception as exc:
            self._failed(exc)
            return
        self._apply(job, known, extracted)

    async def aon_message(self, message: Message) -> None:
        """Like :meth:`on_message`; the LLM call awaits ``acomplete`` and store I/O
        runs in a worker thread, so the event loop is never held."""
        job = self._begin(message)
        if job is None:
            trace.annotate({"memory.action": "noop"})
            return
        try:
            known = await asyncio.to_thread(self.known_facts) if self.persist else self.known_facts()
        except StoreUnavailableError as exc:
            self._store_down(exc)
            return
        try:
            extracted = await aextract_facts(
                self.llm, job.text, role=job.role, known_facts=[k.text for k in known]
            )
        except Exception as exc:
            self._failed(exc)
            return
        if self.persist:
            await asyncio.to_thread(self._apply, job, known, extracted)
        else:
            self._apply(job, known, extracted)

    def render(self, query: str) -> list[Message]:
        if not self.inject:
            return []
        with self._lock:
            facts = list(self.facts)
        if not facts:
            return []
        suffix = framing.provenance(framing.LEARNED, self.confidence)
        return [SystemMessage(framing.notes_section(HEADING, facts, [suffix] * len(facts)))]

    def clear(self) -> None:
        """Forget the extracted facts held here (persisted facts stay in the store)."""
        with self._lock:
            self.facts = []
            self.inspected = 0

    def isolated_copy(self) -> FactExtractionBlock:
        """A copy with its own fact list; refused when it would write to a store."""
        if self.persist:
            raise MemoryIsolationError(
                "FactExtractionBlock(persist=True) writes to an external store; an isolated "
                "copy would write there too"
            )
        copy = FactExtractionBlock(
            self.llm,
            max_facts=self.max_facts,
            extract_every=self.extract_every,
            roles=self.roles,
            inject=self.inject,
            scope=self.scope,
            scope_id=self.scope_id,
            project_id=self.project_id,
            confidence=self.confidence,
            max_persisted=self.max_persisted,
            name=self.name,
            fact_policy=self.fact_policy,
            ttl=self.ttl,
            clock=self.clock,
        )
        with self._lock:
            copy.facts = list(self.facts)
            copy.inspected = self.inspected
        return copy

    # -- persistence ---------------------------------------------------------------

    def dump_state(self) -> dict[str, Any]:
        """The extracted facts (and how many messages were inspected), as JSON-ready data."""
        with self._lock:
            return {"version": 1, "facts": list(self.facts), "inspected": self.inspected}

    def load_state(self, data: Any) -> None:
        """Replace the fact list with :meth:`dump_state` output; corrupt data raises
        and leaves the current list as it was."""
        if data is None:
            return
        facts = data.get("facts") if isinstance(data, dict) else data
        inspected = data.get("inspected", 0) if isinstance(data, dict) else 0
        if not isinstance(facts, list) or not all(isinstance(f, str) for f in facts):
            raise InvalidValueError("facts state is corrupt: no list of fact strings")
        if isinstance(inspected, bool) or not isinstance(inspected, int) or inspected < 0:
            raise InvalidValueError("facts state is corrupt: bad inspected count")
        unique: dict[str, str] = {}
        for fact in facts:
            key = normalize_text(fact)
            # Saved before a policy (or under a looser one): judged again on load.
            if key and key not in unique and judge(self.fact_policy, fact, framing.USER_SAID) == KEEP:
                unique[key] = fact
        with self._lock:
            self.facts = list(unique.values())[-self.max_facts :]
            self.inspected = inspected


__all__ = ["HEADING", "FactExtractionBlock", "KnownFact"]
