"""The SQL the fact stores share (SQLite ``?``, Postgres ``%s``): the columns of a
fact row, the insert of a new fact, and WHERE clauses, built once.

The scoping rules decide *which* subjects a call touches (learn/scoping.py);
this turns that decision into SQL the same way for every SQL backend.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fastaiagent.facts.fact import Fact
from fastaiagent.facts.scoping import Selector
from fastaiagent.facts.store import BrowseFilter

FACT_COLUMNS = tuple(field.name for field in dataclasses.fields(Fact))
"""The columns of a whole fact row, in Fact's field order, so a row builds a
fact in one positional call."""

_INSERT_COLUMNS = (
    "fact, fact_key, scope, scope_id, project_id, confidence, source, source_trace_id, "
    "created_at, superseded_by, metadata, valid_from, valid_to"
)


def insert_fact(table: str, mark: str) -> str:
    """The INSERT of a new active fact (``superseded_by`` NULL) into ``table``; its
    parameters are :func:`fact_values`'."""
    marks = ", ".join([mark] * 9 + ["NULL"] + [mark] * 3)
    return f"INSERT INTO {table} ({_INSERT_COLUMNS}) VALUES ({marks})"


def fact_values(fact: Fact, key: str, metadata: Any) -> tuple[Any, ...]:
    """The parameters of :func:`insert_fact`: the fact, its normalised text ``key``
    and its metadata as the backend stores it (JSON text, or a JSONB adapter)."""
    return (
        fact.fact,
        key,
        fact.scope,
        fact.scope_id,
        fact.project_id,
        float(fact.confidence),
        fact.source,
        fact.source_trace_id,
        fact.created_at,
        metadata,
        fact.valid_from,
        fact.valid_to,
    )


def selector_where(selector: Selector, *, active_only: bool, mark: str) -> tuple[str, list[Any]]:
    """The subjects of ``selector`` (``scope_id=None``: all of them), optionally active only."""
    clauses = [f"scope = {mark}", f"project_id = {mark}"]
    params: list[Any] = [selector.scope, selector.project_id]
    if selector.scope_id is not None:
        clauses.append(f"scope_id = {mark}")
        params.append(selector.scope_id)
    if active_only:
        clauses.append("superseded_by IS NULL")
    return " AND ".join(clauses), params


def browse_where(wanted: BrowseFilter, *, mark: str, like: str = "LIKE") -> tuple[list[str], list[Any]]:
    """The filters of a cross-subject listing; None leaves a column unfiltered
    (``valid_at=None``: expired facts too; ``text``: facts containing it, with
    ``like`` the case-insensitive operator: SQLite's LIKE, Postgres' ILIKE)."""
    clauses: list[str] = []
    params: list[Any] = []
    columns = (("scope", wanted.scope), ("scope_id", wanted.scope_id), ("project_id", wanted.project_id))
    for column, value in columns:
        if value is not None:
            clauses.append(f"{column} = {mark}")
            params.append(value)
    if not wanted.include_superseded:
        clauses.append("superseded_by IS NULL")
    if wanted.valid_at is not None:
        clauses.append(valid_clause(mark))
        params += [wanted.valid_at, wanted.valid_at]
    if wanted.text:
        clauses.append(text_clause(mark, like=like))
        params.append(like_pattern(wanted.text))
    return clauses, params


def valid_clause(mark: str) -> str:
    """Rows valid at a moment (the moment twice, as ``mark`` parameters)."""
    return f"(valid_from IS NULL OR valid_from <= {mark}) AND (valid_to IS NULL OR valid_to > {mark})"


def as_of_clause(mark: str) -> str:
    """Rows recorded, not yet superseded and valid at a moment (the moment four times)."""
    return (
        f"created_at <= {mark} AND (superseded_by IS NULL OR superseded_at > {mark}) "
        f"AND {valid_clause(mark)}"
    )


def text_clause(mark: str, *, like: str) -> str:
    """Rows whose text contains a pattern (``%text%``, escaped with :func:`like_pattern`)."""
    return f"fact {like} {mark} ESCAPE '\\'"


def like_pattern(text: str) -> str:
    """``%text%`` with LIKE's own characters escaped."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"
