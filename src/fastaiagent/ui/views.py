"""What the pages show, computed from the stores (no web framework here)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from fastaiagent._format import format_time
from fastaiagent._validate import identifier, integer
from fastaiagent.errors import InvalidValueError
from fastaiagent.facts.fact import SCOPES, Fact
from fastaiagent.facts.store import FactStore, SubjectCount
from fastaiagent.facts.timeline import versions
from fastaiagent.trace.redaction import RedactionPolicy
from fastaiagent.trace.store import SpanNode, TraceStore, build_tree, flatten

PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
MAX_PAGE_NUMBER = 1_000_000  # keeps the row offset a number every store accepts
MAX_SUBJECT_OPTIONS = 1000  # a dropdown of every one of 20k users helps nobody
TRACE_ID = re.compile(r"^[0-9a-f]{32}$")


def switch_on(value: str | None) -> bool:
    """A query switch (``?mask=1``): on for 1, true, on or yes, in any case."""
    return (value or "").lower() in ("1", "true", "on", "yes")


@dataclass(frozen=True)
class Subject:
    """A ``scope:scope_id`` partition (within a project), as the scope filter offers it."""

    scope: str
    scope_id: str
    project_id: str = ""

    @property
    def label(self) -> str:
        base = f"{self.scope}:{self.scope_id}"
        return f"{base} (project {self.project_id})" if self.project_id else base

    @property
    def key(self) -> str:
        """URL form: ``scope:scope_id``, ``@project`` appended when set; ids %-escaped."""
        key = f"{self.scope}:{quote(self.scope_id, safe='')}"
        return f"{key}@{quote(self.project_id, safe='')}" if self.project_id else key

    @property
    def quoted_id(self) -> str:
        """``scope_id`` %-escaped as one URL path segment (a ``/`` in it too)."""
        return quote(self.scope_id, safe="")


def parse_subject(key: str) -> Subject:
    """The inverse of :attr:`Subject.key`; ValueError for a malformed or unknown scope.
    ``user:*`` (any scope) means every subject of the scope, as in the API."""
    scope, sep, rest = key.partition(":")
    if not sep or scope not in SCOPES:
        raise InvalidValueError(f"scope filter must look like 'user:alice' or 'user:*', got {key!r}")
    scope_id, _, project = rest.rpartition("@") if "@" in rest else (rest, "", "")
    # The one id rule: a NUL, a lone surrogate or an id too long is a 400 with the reason.
    scope_id = identifier(
        "the scope filter's id", unquote(scope_id, errors="surrogateescape"),
        allow_wildcard=True, allow_empty=True,
    )  # fmt: skip
    project = identifier(
        "the scope filter's project", unquote(project, errors="surrogateescape"), allow_empty=True
    )
    return Subject(scope, scope_id, project)


EVERY = "*"  # the scope_id that means every subject of a scope


def check_paging(page: Any, per_page: Any) -> tuple[int, int]:
    """``page`` in 1..MAX_PAGE_NUMBER and ``per_page`` in 1..MAX_PAGE_SIZE, else InvalidValueError."""
    return (
        integer("page", page, minimum=1, maximum=MAX_PAGE_NUMBER),
        integer("per_page", per_page, minimum=1, maximum=MAX_PAGE_SIZE),
    )


@dataclass
class FactRow:
    id: int | None
    fact: str
    subject: str
    source_trace_id: str | None
    source: str  # the source name: manual, learned, traces (Fact.source_words)
    confidence: str
    created: str
    superseded_by: int | None
    valid: str = ""  # "from .. to" when the fact has a validity
    expired: bool = False
    superseded: str = ""  # when it was replaced
    # Where "superseded by" leads on the fact page: "#version-N" in the same
    # timeline, "/memory/facts/N" beyond it, "" when that version was deleted.
    successor_link: str = ""


@dataclass
class FactHistory:
    """One fact's versions, newest first, and whether its newest is active."""

    subject: str
    project_id: str
    rows: list[FactRow]
    head_id: int
    head_active: bool
    head_expired: bool
    user_key: str = ""  # a user's fact: the Memory page filter of that user (it can forget them)


@dataclass
class MemoryPage:
    rows: list[FactRow]
    subjects: list[tuple[str, str, int]]  # (key, label, count)
    hidden_subjects: int
    total: int
    selected: str
    show_superseded: bool
    mask: bool
    page: int
    per_page: int
    has_next: bool
    text: str = ""
    show_expired: bool = False
    # The user the filter names (scope user:<id>, not user:*): the page offers to forget them.
    user: Subject | None = None
    user_label: str = ""  # its id as shown (masked when secrets are)


def _masked(text: str, policy: RedactionPolicy | None) -> str:
    return policy.redact(text) if policy is not None else text


def _validity(fact: Fact) -> str:
    if fact.valid_from is None and fact.valid_to is None:
        return ""
    start = format_time(fact.valid_from) if fact.valid_from is not None else "…"
    end = format_time(fact.valid_to) if fact.valid_to is not None else "…"
    return f"{start} → {end}"


def _row(fact: Fact, policy: RedactionPolicy | None, now: float | None = None) -> FactRow:
    text, scope_id = fact.fact, fact.scope_id
    if policy is not None:
        text, scope_id = policy.redact(text), policy.redact(scope_id)
    return FactRow(
        id=fact.id,
        fact=text,
        subject=f"{fact.scope}:{scope_id}",
        source_trace_id=fact.source_trace_id,
        source=fact.source_words,
        confidence=f"{fact.confidence:.2f}",
        created=format_time(fact.created_at),
        superseded_by=fact.superseded_by,
        valid=_validity(fact),
        expired=fact.expired(time.time() if now is None else now),
        superseded=format_time(fact.superseded_at or 0),
    )


def _subject_options(
    counts: list[SubjectCount], mask_with: RedactionPolicy | None
) -> list[tuple[str, str, int]]:
    """The scope filter's (key, label, count) entries, at most MAX_SUBJECT_OPTIONS."""
    options = []
    for entry in counts[:MAX_SUBJECT_OPTIONS]:
        item = Subject(entry.scope, entry.scope_id, entry.project_id)
        label = mask_with.redact(item.label) if mask_with is not None else item.label
        options.append((item.key, label, entry.count))
    return options


def _subject_total(counts: list[SubjectCount], chosen: Subject | None) -> int:
    """How many facts the filter ``chosen`` matches (all of them when None)."""
    if chosen is None:
        return sum(c.count for c in counts)
    if chosen.scope_id == EVERY:
        return sum(
            c.count for c in counts if (c.scope, c.project_id) == (chosen.scope, chosen.project_id)
        )
    return sum(
        c.count
        for c in counts
        if (c.scope, c.scope_id, c.project_id) == (chosen.scope, chosen.scope_id, chosen.project_id)
    )


def memory_page(
    store: FactStore,
    *,
    subject: str = "",
    show_superseded: bool = False,
    mask_with: RedactionPolicy | None = None,
    page: int = 1,
    per_page: int = PAGE_SIZE,
    text: str = "",
    show_expired: bool = False,
) -> MemoryPage:
    """One page of facts, newest first; ``subject`` is a :attr:`Subject.key`, ``user:*``
    (every user) or "" for all; ``text`` keeps facts containing it; expired facts
    only with ``show_expired``.

    Raises InvalidValueError for a malformed ``subject`` or a page out of range
    (see :func:`check_paging`).
    """
    page, per_page = check_paging(page, per_page)
    chosen = parse_subject(subject) if subject else None
    counts: list[SubjectCount] = store.subjects(include_superseded=show_superseded)
    every = chosen is not None and chosen.scope_id == EVERY
    facts = store.browse(
        scope=chosen.scope if chosen else None,
        scope_id=chosen.scope_id if chosen and not every else None,
        project_id=chosen.project_id if chosen else None,
        include_superseded=show_superseded,
        limit=per_page + 1,  # one extra row says whether a next page exists
        offset=(page - 1) * per_page,
        include_expired=show_expired,
        text=text or None,
    )
    one_user = chosen is not None and chosen.scope == "user" and bool(chosen.scope_id) and not every
    return MemoryPage(
        rows=[_row(f, mask_with) for f in facts[:per_page]],
        subjects=_subject_options(counts, mask_with),
        hidden_subjects=max(0, len(counts) - MAX_SUBJECT_OPTIONS),
        total=_subject_total(counts, chosen),
        selected=subject,
        show_superseded=show_superseded,
        mask=mask_with is not None,
        page=page,
        per_page=per_page,
        has_next=len(facts) > per_page,
        text=text,
        show_expired=show_expired,
        user=chosen if one_user else None,
        user_label=_masked(chosen.scope_id, mask_with) if chosen is not None and one_user else "",
    )


def fact_history(
    store: FactStore, fact_id: int, *, mask_with: RedactionPolicy | None = None
) -> FactHistory | None:
    """The timeline of the fact ``fact_id`` belongs to, or None when there is no such fact."""
    chain = versions(store, fact_id)
    if not chain:
        return None
    now = time.time()
    head = chain[0]
    rows = [_row(f, mask_with, now) for f in chain]
    _link_successors(store, rows)
    return FactHistory(
        subject=rows[0].subject,
        project_id=head.project_id,
        rows=rows,
        head_id=int(head.id or 0),
        head_active=head.active,
        head_expired=head.expired(now),
        user_key=Subject("user", head.scope_id, head.project_id).key if head.scope == "user" else "",
    )


def _link_successors(store: FactStore, rows: list[FactRow]) -> None:
    """Set each row's :attr:`FactRow.successor_link`: a version of the same timeline
    by its anchor, another that still exists by its page, a deleted one not at all
    (deleting the newest version leaves the one it replaced pointing at it)."""
    shown = {row.id for row in rows}
    for row in rows:
        successor = row.superseded_by
        if successor is None:
            continue
        if successor in shown:
            row.successor_link = f"#version-{successor}"
        elif store.get(successor) is not None:
            row.successor_link = f"/memory/facts/{successor}"


# -- traces ----------------------------------------------------------------------


def _mask(value: Any, policy: RedactionPolicy | None) -> Any:
    return policy.redact_value(value) if policy is not None else value


@dataclass
class RunRow:
    trace_id: str
    name: str
    agent: str
    input: str
    started: str
    duration_ms: str
    status: str
    span_count: int


@dataclass
class Recalled:
    text: str
    score: str


@dataclass
class SpanView:
    name: str
    depth: int
    duration_ms: str
    status: str
    is_memory: bool
    recalled: list[Recalled] = field(default_factory=list)
    attributes: list[tuple[str, str]] = field(default_factory=list)
    error: str = ""


def runs_page(
    store: TraceStore, *, page: int = 1, per_page: int = PAGE_SIZE, mask_with: RedactionPolicy | None = None
) -> tuple[list[RunRow], int, bool]:
    """Runs newest first: (rows, total, has_next); InvalidValueError for a page out of range."""
    page, per_page = check_paging(page, per_page)
    runs = store.list_runs(limit=per_page + 1, offset=(page - 1) * per_page)
    rows = [
        RunRow(
            trace_id=run.trace_id,
            name=run.name,
            agent=str(run.attributes.get("agent.name", "")),
            input=str(_mask(str(run.attributes.get("agent.input", ""))[:160], mask_with)),
            started=format_time(run.start_ns / 1e9),
            duration_ms=f"{run.duration_ms:.1f}",
            status=run.status,
            span_count=run.span_count,
        )
        for run in runs[:per_page]
    ]
    return rows, store.count_runs(), len(runs) > per_page


def _display(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def _span_view(node: SpanNode, policy: RedactionPolicy | None) -> SpanView:
    span = node.span
    attrs = dict(span.attributes)
    recalled: list[Recalled] = []
    snippets = attrs.pop("memory.snippets", None)
    if isinstance(snippets, list):
        scores = attrs.pop("memory.scores", None)
        scores = scores if isinstance(scores, list) else []
        for i, text in enumerate(snippets):
            score = scores[i] if i < len(scores) else None
            recalled.append(
                Recalled(
                    text=str(_mask(str(text), policy)),
                    score=f"{score:.3f}" if isinstance(score, (int, float)) else "",
                )
            )
    error = str(attrs.pop("memory.error", ""))
    return SpanView(
        name=span.name,
        depth=min(node.depth, 12),
        duration_ms=f"{span.duration_ms:.2f}",
        status=span.status,
        is_memory=span.name.startswith("memory."),
        recalled=recalled,
        attributes=[(k, _display(_mask(v, policy))) for k, v in sorted(attrs.items())],
        error=str(_mask(error, policy)),
    )


def trace_view(
    store: TraceStore, trace_id: str, *, mask_with: RedactionPolicy | None = None
) -> list[SpanView] | None:
    """The span tree of one trace, flattened parents-first, or None if unknown."""
    if not TRACE_ID.match(trace_id):
        return None
    spans = store.get_trace(trace_id)
    if not spans:
        return None
    return [_span_view(node, mask_with) for node in flatten(build_tree(spans))]
