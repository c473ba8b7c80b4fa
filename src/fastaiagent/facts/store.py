"""The FactStore contract every durable backend implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, cast, runtime_checkable

from fastaiagent._validate import identifier, integer, text_problem
from fastaiagent.errors import InvalidValueError
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.scoping import (
    Selector,
    check_fact_id,
    check_fact_text,
    delete_selector,
    page_selector,
)
from fastaiagent.facts.validity import moment_or_now

DEFAULT_LIMIT = 50
"""How many facts a read returns when no limit is given (``list_active``,
``Memory.retrieve``): reads are bounded by default; page with ``offset``."""

DELETE_BATCH = 500
"""Facts one step of a subject delete removes at most, by default (each shipped
store has a ``delete_batch`` attribute, sized so a step takes a few ms: 500 on
Postgres, 200 on SQLite, 100 on Redis). Each step is its own short transaction
(or script), so deleting a huge subject never holds the server or the database
lock for long, and a crash midway leaves a state that repeating the delete
finishes."""


@dataclass(frozen=True)
class SubjectCount:
    """How many facts one ``scope:scope_id`` (within a project) holds."""

    scope: str
    scope_id: str
    project_id: str
    count: int


@runtime_checkable
class FactStore(Protocol):
    """Durable facts, scoped by (scope, scope_id, project_id).

    The scoping rules live in :mod:`fastaiagent.facts.scoping`; run
    :mod:`fastaiagent.facts.conformance.facts` to check an implementation.
    ``list_active``, ``list_as_of``, ``browse`` and ``delete`` carry the bodies
    the shipped stores share (they derive from :class:`StoreFront`); another
    implementation writes its own.
    """

    def add(self, fact: Fact) -> int:
        """Store ``fact``; idempotent: the same normalised text in the same
        subject returns the one active row's id, also under concurrency.
        Re-adding a superseded text makes it active again (a new row), and so
        does re-adding the text of a fact expired at the new one's ``created_at``
        (the new row supersedes the expired one)."""
        ...

    def get(self, fact_id: int) -> Fact | None:
        """The fact with this id, active or superseded, or None."""
        ...

    def list_active(
        self,
        scope: str,
        scope_id: str,
        project_id: str = "",
        limit: int | None = DEFAULT_LIMIT,
        offset: int = 0,
        *,
        now: float | None = None,
        include_expired: bool = False,
    ) -> list[Fact]:
        """Active facts of a subject that are valid at ``now`` (UNIX seconds; None:
        the current time), newest first (``"*"`` = every subject);
        ``include_expired=True`` also returns facts outside their validity.
        ``limit=None`` reads them all. ``offset`` skips that many of the newest
        (pages: ``offset=0, limit``; ``offset=limit, limit``; ...). Expired facts
        cost the per-subject read nothing: they sit in an index of their own."""
        selector = page_selector(scope, scope_id, project_id, limit, offset)
        if selector is None:
            return []
        return cast(StoreFront, self).read_active(selector, limit, offset, now, include_expired)

    def list_as_of(
        self,
        scope: str,
        scope_id: str,
        project_id: str,
        at: float,
        limit: int | None = DEFAULT_LIMIT,
        offset: int = 0,
    ) -> list[Fact]:
        """The facts of a subject that were recorded and not yet superseded at ``at``
        and valid then, newest first: what the store believed at that moment (an
        audit read of the subject's rows)."""
        selector = page_selector(scope, scope_id, project_id, limit, offset)
        if selector is None:
            return []
        return cast(StoreFront, self).read_as_of(selector, moment_or_now(at), limit, offset)

    def replaced(self, fact_id: int) -> list[Fact]:
        """The facts ``fact_id`` superseded directly (its previous versions)."""
        ...

    def expire(self, scope: str, scope_id: str, project_id: str, fact_id: int, at: float) -> bool:
        """Set an active fact's ``valid_to`` to ``at`` (it stops being returned from
        then on); False when no active fact of those subjects has that id."""
        ...

    def prune_history(self, before: float, *, project_id: str | None = None, limit: int = DELETE_BATCH) -> int:
        """Delete at most ``limit`` facts that expired (``valid_to``) or were superseded
        (``superseded_at``) before ``before``, found by index; returns the count.
        ``project_id=None`` covers every project. Call again while it returns ``limit``."""
        ...

    def find_active(self, scope: str, scope_id: str, project_id: str, text: str) -> Fact | None:
        """The subject's active fact whose normalised text equals ``text``'s, or None;
        found through the unique active-key index, whatever the subject's size.
        ``scope_id`` is one exact id (``"*"`` is not a wildcard here)."""
        ...

    def supersede(self, old_id: int, new_id: int, *, at: float | None = None) -> None:
        """Mark ``old_id`` replaced by ``new_id`` (same subject, no self or cycle),
        superseded at ``at`` (None: the current time)."""
        ...

    def update(self, new: Fact, old_id: int) -> int:
        """Add ``new`` and supersede ``old_id`` with it, in one transaction; the old
        fact's ``superseded_at`` is the new one's ``created_at``."""
        ...

    def delete(
        self,
        scope: str,
        scope_id: str,
        project_id: str = "",
        *,
        fact: str | None = None,
        fact_id: int | None = None,
    ) -> int:
        """Hard-delete a subject's facts and history (or one fact); returns the count.

        A whole subject (or ``"*"``) goes in bounded steps (see
        :data:`DELETE_BATCH`), each its own transaction: a crash midway leaves a state that a
        repeat finishes, and the count is what was deleted. ``fact=`` removes
        every row of the subject with that normalised text, the active fact and its
        superseded versions, found by index (never by reading the subject)."""
        selector = delete_selector(scope, scope_id, project_id)
        key = check_fact_text(fact) if fact is not None else None
        one = check_fact_id(fact_id) if fact_id is not None else None
        return cast(StoreFront, self).delete_rows(selector, key, one)

    def prune_learned(self, scope: str, scope_id: str, project_id: str = "", *, keep: int) -> int:
        """Delete the oldest run-learned active facts beyond ``keep``; returns the count."""
        ...

    def browse(
        self,
        *,
        scope: str | None = None,
        scope_id: str | None = None,
        project_id: str | None = None,
        include_superseded: bool = False,
        limit: int = 50,
        offset: int = 0,
        include_expired: bool = False,
        now: float | None = None,
        text: str | None = None,
    ) -> list[Fact]:
        """Facts across subjects for UIs and CLIs, newest first (filters before limit);
        expired ones (at ``now``) only with ``include_expired``; ``text`` keeps facts
        containing it (case-insensitive)."""
        integer("limit", limit, minimum=0)  # a page of a browse has a size (no None)
        for name, value in (("scope_id", scope_id), ("project_id", project_id)):
            if value is not None:
                identifier(name, value, allow_wildcard=True, allow_empty=True)
        if text is not None and text_problem(text) is not None:
            raise InvalidValueError(f"text {text_problem(text)}")
        valid_at = None if include_expired else moment_or_now(now)
        wanted = BrowseFilter(
            scope, scope_id, project_id, include_superseded, valid_at, text, limit, max(0, int(offset))
        )
        return cast(StoreFront, self).browse_facts(wanted)

    def subjects(self, *, include_superseded: bool = False) -> list[SubjectCount]:
        """Every subject with its fact count."""
        ...

    def close(self) -> None:
        """Release connections; the store reopens on its next use."""
        ...


@dataclass(frozen=True)
class BrowseFilter:
    """The typed form of :meth:`FactStore.browse`'s keywords, checked, as the
    shipped stores receive them (:meth:`StoreFront.browse_facts`)."""

    scope: str | None
    scope_id: str | None
    project_id: str | None
    include_superseded: bool
    valid_at: float | None  # None: expired facts too (include_expired)
    text: str | None
    limit: int
    offset: int


class StoreFront(FactStore):
    """The base of the shipped stores. :class:`FactStore` checks the arguments of
    ``list_active``, ``list_as_of``, ``browse`` and ``delete`` the same way for
    every one of them and hands the backend a checked, typed request: a backend
    implements :meth:`read_active`, :meth:`read_as_of`, :meth:`browse_facts` and
    :meth:`delete_rows` (and the other verbs of the protocol)."""

    def read_active(
        self, selector: Selector, limit: int | None, offset: int, now: float | None, include_expired: bool
    ) -> list[Fact]:
        """The backend's part of :meth:`list_active` (``selector`` checked, not empty)."""
        raise NotImplementedError

    def read_as_of(self, selector: Selector, at: float, limit: int | None, offset: int) -> list[Fact]:
        """The backend's part of :meth:`list_as_of`."""
        raise NotImplementedError

    def browse_facts(self, wanted: BrowseFilter) -> list[Fact]:
        """The backend's part of :meth:`browse`, newest first, filters before the page."""
        raise NotImplementedError

    def delete_rows(self, selector: Selector, key: str | None, fact_id: int | None) -> int:
        """The backend's part of :meth:`delete`: ``key`` a normalised text (every row of
        it, history too), ``fact_id`` one fact; neither: the whole selection, in steps."""
        raise NotImplementedError

