"""WHERE clauses of the SQL fact stores (SQLite ``?``, Postgres ``%s``), built once.

The scoping rules decide *which* subjects a call touches (learn/scoping.py);
this turns that decision into SQL the same way for every SQL backend.
"""

from __future__ import annotations

from typing import Any

from fastaiagent.facts.scoping import Selector


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


def browse_where(
    scope: str | None,
    scope_id: str | None,
    project_id: str | None,
    *,
    include_superseded: bool,
    mark: str,
) -> tuple[list[str], list[Any]]:
    """Filters of a cross-subject listing; None leaves a column unfiltered."""
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (("scope", scope), ("scope_id", scope_id), ("project_id", project_id)):
        if value is not None:
            clauses.append(f"{column} = {mark}")
            params.append(value)
    if not include_superseded:
        clauses.append("superseded_by IS NULL")
    return clauses, params
