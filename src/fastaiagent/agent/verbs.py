"""MemoryVerbs: persist, retrieve, update and forget, with their guard rails.

A part of :class:`fastaiagent.agent.memory.Memory` (which delegates its verbs
here). Tiers map to store scopes: global -> agent, user -> user; the session
tier is the window, not a store.
"""

from __future__ import annotations

import hashlib
import logging
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from fastaiagent import trace
from fastaiagent._validate import boolean, duration, fraction, identifier, integer, moment
from fastaiagent.agent.deprecation import warn_renamed
from fastaiagent.agent.forgetting import delete_agent_facts, same_text_ids
from fastaiagent.agent.memory_config import MemoryConfig
from fastaiagent.agent.memory_stack import MemoryStack
from fastaiagent.errors import (
    InvalidTypeError,
    InvalidValueError,
    NotFoundError,
    UnsupportedTierError,
)
from fastaiagent.facts.fact import SOURCE_MANUAL, Fact
from fastaiagent.facts.scoping import WILDCARD, not_in_subject
from fastaiagent.facts.store import DEFAULT_LIMIT, FactStore
from fastaiagent.facts.timeline import versions
from fastaiagent.facts.validity import read_clock
from fastaiagent.recall.facts import search_facts
from fastaiagent.recall.pipeline import explain

logger = logging.getLogger("fastaiagent.memory")
TIERS = ("global", "user", "session")
DEFAULT_SEARCH_LIMIT = 10


@dataclass(frozen=True)
class FactWrite:
    """What a write says beside the fact's text: ``confidence`` (0 to 1),
    ``metadata``, and when it holds (``valid_from`` / ``valid_to``, or ``ttl``
    from now: a datetime, naive read as UTC, or UNIX seconds; a ``ttl`` in
    seconds or a timedelta). Checked by the verb that writes it."""

    confidence: float = 1.0
    metadata: dict[str, Any] | None = None
    valid_from: datetime | float | None = None
    valid_to: datetime | float | None = None
    ttl: timedelta | float | None = None


class _DefaultPage:
    """``retrieve``'s ``limit`` when none is passed: a page of :data:`DEFAULT_LIMIT`
    facts (:data:`DEFAULT_SEARCH_LIMIT` by meaning); ``limit=None`` is every fact."""

    def __repr__(self) -> str:
        return "DEFAULT_PAGE"


DEFAULT_PAGE: Any = _DefaultPage()


@dataclass(frozen=True)
class FactPage:
    """Which facts a read returns: ``limit`` / ``offset`` (a page: :data:`DEFAULT_PAGE`
    when not given, ``None`` for every fact), ``as_of`` (what was held then) and
    ``include_expired``."""

    limit: int | None = DEFAULT_PAGE
    offset: int = 0
    as_of: datetime | float | None = None
    include_expired: bool = False


def by_name(
    verb: str, by_position: tuple[Any, ...], *, old: Any, tier: str, id: str | None
) -> tuple[int | str, str, str | None]:
    """``old``, ``tier`` and ``id`` of ``verb(new, ...)``, named, or by position
    (deprecated: ``update("A", "B")`` reads either way round)."""
    if by_position:
        if len(by_position) > 3:
            raise InvalidTypeError(f"{verb}() takes the new text and at most old, tier, id")
        named = {"old": old is not None, "tier": tier != "user", "id": id is not None}
        for name, _ in zip(("old", "tier", "id"), by_position, strict=False):
            if named[name]:
                raise InvalidTypeError(f"{verb}() got {name} both by position and as {name}=")
        warn_renamed(f"{verb}(new, old) with old by position", f"{verb}(new, old=...)", stacklevel=4)
        named_values: list[Any] = [old, tier, id]
        old, tier, id = [*by_position, *named_values[len(by_position) :]]
    if old is None:
        raise InvalidValueError(f"{verb}() needs old= (the text or id of the fact it replaces)")
    return old, tier, id


class MemoryVerbs:
    """The direct verbs over a Memory's fact store.

    ``forget_user_state(user_id, everywhere)`` drops a forgotten user's
    in-process and shared window state (every agent's when ``everywhere``) and
    says how many rows of each kind went; ``flush(user_id)`` waits for that
    user's queued learning (``"*"``: everyone's), so it cannot write facts back.
    """

    def __init__(
        self,
        config: MemoryConfig,
        store: FactStore,
        stack: MemoryStack,
        *,
        forget_user_state: Callable[[str, bool], dict[str, int]],
        flush: Callable[[str], Any],
    ) -> None:
        self.config = config
        self.store = store
        self.stack = stack
        self._forget_user_state = forget_user_state
        self._flush = flush

    def now(self) -> float:
        """The Memory's current time (its ``clock``), in UNIX seconds."""
        clock = self.config.clock
        return time.time() if clock is None else read_clock(clock)

    def validity(
        self, valid_from: Any, valid_to: Any, ttl: Any, now: float
    ) -> tuple[float | None, float | None]:
        """``valid_from`` / ``valid_to`` / ``ttl`` of a write as UNIX seconds."""
        if valid_from is None and valid_to is None and ttl is None:
            return None, None  # the usual write: open-ended
        start = moment("valid_from", valid_from, allow_none=True)
        end = moment("valid_to", valid_to, allow_none=True)
        seconds = duration("ttl", ttl, allow_none=True)
        if seconds is not None:
            if end is not None:
                raise InvalidValueError("pass ttl= or valid_to=, not both: ttl is valid_to = now + ttl")
            end = (start if start is not None and start > now else now) + seconds
        return start, end

    def _subject(self, verb: str, tier: str, id: str | None) -> tuple[str, str | None]:
        """The store (scope, scope_id) of a tier; scope_id None when there is none."""
        if tier == "session":
            raise UnsupportedTierError(
                f"{verb}(tier='session'): the session tier is the conversation window, not a "
                "durable store; use the window (Memory(window=...)) or tier='user'/'global'"
            )
        if tier not in TIERS:
            raise InvalidValueError(f"unknown tier {tier!r}; expected one of {TIERS}")
        if id:  # "*" here is a read or delete of every subject; writes refuse it below
            identifier("id", id, allow_wildcard=True)
        elif id is not None and not isinstance(id, str):
            raise InvalidTypeError(f"id must be a str, got {type(id).__name__}")
        if tier == "global":
            return "agent", id or self.config.agent_id
        return "user", id or self.config.static_user

    def _warn_global_without_agent(self, verb: str, tier: str, scope_id: str | None) -> None:
        if tier == "global" and not scope_id:
            warnings.warn(
                f'{verb}(tier="global") on a Memory with no agent_id: the fact is filed under an '
                "empty agent id and no Memory(agent_id=...) will inject it. "
                "Set Memory(agent_id=...) or pass id=",
                UserWarning,
                stacklevel=3,
            )

    def _write_scope_id(self, verb: str, tier: str, id: str | None) -> tuple[str, str]:
        scope, scope_id = self._subject(verb, tier, id)
        if scope_id == WILDCARD:
            raise InvalidValueError(f'{verb}: "*" is a read/delete wildcard, not an id to write under')
        if scope == "user" and not scope_id:
            raise InvalidValueError(f'{verb}(tier="user") needs id= (the user the fact is about)')
        self._warn_global_without_agent(verb, tier, scope_id)
        return scope, scope_id or ""

    def persist(self, text: str, tier: str, id: str | None, write: FactWrite) -> int:
        """:meth:`Memory.persist <fastaiagent.agent.memory.Memory.persist>`."""
        scope, scope_id = self._write_scope_id("persist", tier, id)
        fraction("confidence", write.confidence)
        now = self.now()
        start, end = self.validity(write.valid_from, write.valid_to, write.ttl, now)
        with trace.span(
            "memory.persist", {"memory.tier": tier, "memory.scope": scope, "memory.scope_id": scope_id}
        ):
            # Positional, in Fact's field order: a third of the cost of keywords.
            fact = Fact(text, scope, scope_id, self.config.project_id, write.confidence, SOURCE_MANUAL,
                        None, dict(write.metadata or {}), None, now, None, start, end)  # fmt: skip
            fact_id = self.store.add(fact)
            trace.annotate({"memory.fact_id": fact_id})
        return fact_id

    def retrieve(self, query: str | None, tier: str, id: str | None, page: FactPage) -> list[Fact]:
        """:meth:`Memory.retrieve <fastaiagent.agent.memory.Memory.retrieve>`."""
        limit, offset, include_expired = page.limit, page.offset, page.include_expired
        scope, scope_id = self._subject("retrieve", tier, id)
        # The checks run every turn: the usual values pass without a call.
        if limit is not None and limit is not DEFAULT_PAGE and (type(limit) is not int or limit < 0):
            integer("limit", limit, minimum=0)
        if limit is None and query is not None:
            raise InvalidValueError(
                "retrieve(query, limit=None): a search by meaning returns its closest facts, "
                f"not every fact: pass limit=N (default {DEFAULT_SEARCH_LIMIT}), or leave out "
                "the query to read every fact (limit=None)"
            )
        if type(offset) is not int or offset < 0:
            integer("offset", offset, minimum=0)
        at = None if page.as_of is None else moment("as_of", page.as_of)
        if include_expired is not False:
            boolean("include_expired", include_expired)
        if at is not None and (query is not None or include_expired):
            raise InvalidValueError(
                "retrieve(as_of=) reads what was active and valid then: use it without "
                "query= and include_expired="
            )
        if query is not None and self.config.semantic is None:
            raise InvalidValueError(
                'retrieve(query) searches by meaning and needs Memory(semantic="auto") or a '
                "VectorStore; without it call retrieve(tier=..., id=...) for the list"
            )
        with trace.span(
            "memory.retrieve",
            {"memory.tier": tier, "memory.scope": scope, "memory.scope_id": scope_id or "", "memory.query": query},
        ):
            if (scope == "user" and not scope_id) or limit == 0:
                facts: list[Fact] = []
            else:
                facts = self._read(query, scope, scope_id or "", limit, offset, at, include_expired)
            trace.annotate({"memory.count": len(facts)})
        return facts

    def _read(
        self,
        query: str | None,
        scope: str,
        scope_id: str,
        limit: int | None,
        offset: int,
        at: float | None,
        include_expired: bool,
    ) -> list[Fact]:
        """One page of a subject's facts: by meaning, as of a moment, or newest first."""
        project = self.config.project_id
        if query is not None:
            wanted = DEFAULT_SEARCH_LIMIT if limit is DEFAULT_PAGE else limit
            assert wanted is not None  # refused by retrieve
            found = search_facts(
                self.stack.semantic_index(), query, scope, scope_id, project, limit=offset + wanted,
                now=self.now(), include_expired=include_expired,
            )[offset:]  # fmt: skip
            trace.annotate({"memory.retrieve.reasons": [explain(reasons) for _, reasons in found]})
            return [fact for fact, _ in found]
        wanted = DEFAULT_LIMIT if limit is DEFAULT_PAGE else limit  # None: every fact
        if at is not None:
            return self.store.list_as_of(scope, scope_id, project, at, wanted, offset)
        now = None if self.config.clock is None else self.now()  # None: the store reads the time
        return self.store.list_active(
            scope, scope_id, project, wanted, offset, now=now, include_expired=include_expired
        )

    def _resolve_old(self, old: int | str, scope: str, scope_id: str) -> int:
        if isinstance(old, bool) or not isinstance(old, (int, str)):
            raise InvalidTypeError("old= must be the old fact's text or its int id")
        if isinstance(old, int):
            return old
        # One indexed lookup (the store's unique active key), whatever the user's size.
        found = self.store.find_active(scope, scope_id, self.config.project_id, old)
        if found is not None and found.id is not None:
            return int(found.id)
        raise NotFoundError(
            f"no active {scope}:{scope_id} fact matches old={old!r}: pass the text of an "
            "active fact or its id (retrieve() lists them)"
        )

    def update(self, new: str, old: int | str, tier: str, id: str | None, write: FactWrite) -> int:
        """:meth:`Memory.update <fastaiagent.agent.memory.Memory.update>`."""
        scope, scope_id = self._write_scope_id("update", tier, id)
        now = self.now()
        start, end = self.validity(write.valid_from, write.valid_to, write.ttl, now)
        with trace.span(
            "memory.update", {"memory.tier": tier, "memory.scope": scope, "memory.scope_id": scope_id}
        ):
            old_id = self._resolve_old(old, scope, scope_id)
            fact = Fact(
                fact=new,
                scope=scope,
                scope_id=scope_id,
                project_id=self.config.project_id,
                confidence=write.confidence,
                created_at=now,
                valid_from=start,
                valid_to=end,
            )
            try:
                new_id = self.store.update(fact, old_id)
            except (KeyError, InvalidValueError) as exc:
                if not self._owns(old_id, scope, scope_id):
                    # whatever the store said (a store of your own may name the other
                    # subject): an id outside the caller's subject reads as missing
                    raise not_in_subject(old_id, scope, scope_id, self.config.project_id) from None
                raise InvalidValueError(f"cannot update: {exc.args[0] if exc.args else exc}") from exc
            index = self.stack.semantic_index_if_built
            if new_id != old_id and index is not None:
                index.remove([old_id])
            trace.annotate({"memory.fact_id": new_id, "memory.old_fact_id": old_id})
        return new_id

    def _owns(self, fact_id: int, scope: str, scope_id: str) -> bool:
        """Whether fact ``fact_id`` is the subject's (read on a refused update only)."""
        found = self.store.get(fact_id)
        return found is not None and (found.scope, found.scope_id, found.project_id) == (
            scope, scope_id, self.config.project_id,
        )  # fmt: skip

    def history(self, fact: int | str, tier: str = "user", id: str | None = None) -> list[Fact]:
        """:meth:`Memory.history <fastaiagent.agent.memory.Memory.history>`."""
        scope, scope_id = self._write_scope_id("history", tier, id)
        with trace.span("memory.history", {"memory.tier": tier, "memory.scope": scope}):
            fact_id = self._resolve_old(fact, scope, scope_id)
            chain = versions(self.store, fact_id)
            if chain and (
                chain[0].subject != f"{scope}:{scope_id}"
                or any(f.project_id != self.config.project_id for f in chain)
            ):
                return []  # another subject's fact: nothing of it is shown here
            trace.annotate({"memory.count": len(chain)})
        return chain

    def expire(
        self, fact: int | str, tier: str = "user", id: str | None = None, *, at: Any = None
    ) -> bool:
        """:meth:`Memory.expire <fastaiagent.agent.memory.Memory.expire>`."""
        scope, scope_id = self._write_scope_id("expire", tier, id)
        when = self.now() if at is None else moment("at", at)
        assert when is not None
        with trace.span("memory.expire", {"memory.tier": tier, "memory.scope": scope}):
            fact_id = self._resolve_old(fact, scope, scope_id)
            done = self.store.expire(scope, scope_id, self.config.project_id, fact_id, when)
            trace.annotate({"memory.fact_id": fact_id, "memory.expired": done})
        return done

    def forget(self, tier: str, id: str | None, fact: str | None, agent_only: bool) -> dict[str, int]:
        """:meth:`Memory.forget <fastaiagent.agent.memory.Memory.forget>`, saying how
        many of each kind went: ``facts``, ``fact_vectors`` and, for a whole user,
        ``windows``, ``recall`` (recalled messages) and ``traces`` (their runs)."""
        scope, scope_id = self._subject("forget", tier, id)
        if not scope_id:
            if tier == "user":
                raise InvalidValueError('forget(tier="user") needs id= (or id="*" for every user)')
            raise InvalidValueError(
                'forget(tier="global") needs Memory(agent_id=...) or id=; an empty id would '
                'match every agent\'s global facts (pass id="*" to delete them all on purpose)'
            )
        by_agent = self._by_agent(scope, scope_id, fact, boolean("agent_only", agent_only))
        # Learning queued before the forget must not write the user's facts back
        # after it: wait for this user's queued work (everyone's for "*").
        self._flush(scope_id if scope == "user" else WILDCARD)
        attributes: dict[str, Any] = {"memory.tier": tier, "memory.scope": scope}
        if scope != "user":  # a forgotten user's id is not written back into the traces
            attributes["memory.scope_id"] = scope_id
        with trace.span("memory.forget", attributes):
            count, vectors = self._forget_facts(scope, scope_id, fact, by_agent)
            deleted = {"facts": count, "fact_vectors": vectors}
            if scope == "user" and fact is None:
                deleted.update(self._forget_user_state(scope_id, not by_agent))
            trace.annotate({"memory.count": count, "memory.agent_only": by_agent})
        self._audit(tier, scope, scope_id, fact is not None, by_agent, deleted)
        return deleted

    def _audit(
        self, tier: str, scope: str, scope_id: str, one_fact: bool, by_agent: bool,
        deleted: dict[str, int],
    ) -> None:  # fmt: skip
        """The forget's audit line in the local trace store: who, which subject (a
        user as a digest of the id, never the id or a fact's text), how many of each."""
        subject = scope_id if scope != "user" or scope_id == WILDCARD else "sha256:" + (
            hashlib.sha256(scope_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        )
        attributes: dict[str, Any] = {
            "memory.tier": tier, "memory.subject": subject, "memory.one_fact": one_fact,
            "memory.agent_only": by_agent, "memory.agent_id": self.config.agent_id or "",
            "memory.project_id": self.config.project_id,
            **{f"memory.deleted.{kind}": int(n) for kind, n in deleted.items()},
        }  # fmt: skip
        try:
            trace.audit("memory.forget.audit", attributes)
        except Exception as exc:  # the forget is done; a missing audit line must not undo it
            logger.warning("forget: the audit line could not be written: %s", exc)

    def _forget_facts(
        self, scope: str, scope_id: str, fact: str | None, by_agent: bool
    ) -> tuple[int, int]:
        """Delete the facts and their vectors in every index that may hold them
        (whatever this Memory's ``semantic=``); returns how many facts and vectors."""
        project = self.config.project_id
        indexes = self.stack.fact_indexes()
        if by_agent:
            ids = delete_agent_facts(self.store, scope_id, project, self.config.agent_id or "")
        elif fact is not None:
            indexes = [i for i in indexes if i.holds(scope, scope_id, project)]
            ids = same_text_ids(self.store, scope, scope_id, project, fact) if indexes else []
            count = self.store.delete(scope, scope_id, project, fact=fact)
            return count, sum(index.remove(ids) for index in indexes if ids)
        else:
            count = self.store.delete(scope, scope_id, project)
            return count, sum(index.forget(scope, scope_id, project) for index in indexes)
        return len(ids), sum(index.remove(ids) for index in indexes if ids)

    def _by_agent(self, scope: str, scope_id: str, fact: str | None, agent_only: bool) -> bool:
        """True when a forget deletes only what this agent wrote: ``agent_only``, or
        ``id="*"`` of the user tier on a Memory with an agent id."""
        if agent_only and (scope != "user" or not self.config.agent_id or fact is not None):
            raise InvalidValueError(
                'forget(agent_only=True) deletes what this agent wrote about a user: use it with '
                'tier="user" and no fact=, on a Memory(agent_id=...)'
            )
        wildcard = scope == "user" and scope_id == WILDCARD and bool(self.config.agent_id)
        return agent_only or wildcard
