"""The SQL the SQL stores share (SQLite ``?``, Postgres ``%s``): the columns of a
fact row, the insert of a new fact and WHERE clauses, built once; and the
statements of the namespaced items (:mod:`fastaiagent.facts.items`).

The scoping rules decide *which* subjects a call touches (learn/scoping.py);
this turns that decision into SQL the same way for every SQL backend.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from fastaiagent.errors import FastAIAgentError
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.items import (
    ItemScan,
    ItemWrite,
    StoredItem,
    decode_namespace,
    encode_namespace,
    expiry,
)
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


def equal_clauses(columns: Sequence[tuple[str, Any]], *, mark: str) -> tuple[list[str], list[Any]]:
    """``column = <mark>`` for each ``(column, value)`` whose value is not None (None:
    any), with the values as parameters."""
    wanted = [(column, value) for column, value in columns if value is not None]
    return [f"{column} = {mark}" for column, _ in wanted], [value for _, value in wanted]


def browse_where(wanted: BrowseFilter, *, mark: str, like: str = "LIKE") -> tuple[list[str], list[Any]]:
    """The filters of a cross-subject listing; None leaves a column unfiltered
    (``valid_at=None``: expired facts too; ``text``: facts containing it, with
    ``like`` the case-insensitive operator: SQLite's LIKE, Postgres' ILIKE)."""
    columns = (("scope", wanted.scope), ("scope_id", wanted.scope_id), ("project_id", wanted.project_id))
    clauses, params = equal_clauses(columns, mark=mark)
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


# -- namespaced items -------------------------------------------------------

ITEM_COLUMNS = "ns, key, value, created_at, updated_at, expires_at, ttl_seconds"
"""The columns of an items table, in StoredItem's order (``ns`` encoded)."""


def stored_item(row: Sequence[Any]) -> StoredItem:
    """The item of a row of :data:`ITEM_COLUMNS`."""
    return StoredItem(decode_namespace(row[0]), *row[1:])


class GuardFailed(FastAIAgentError):
    """A conditional write of :meth:`ItemSQL.write_guarded` did not apply: roll back
    (raised and caught inside the SQL item stores; never reaches a caller)."""


class ItemSQL:
    """The SQL of one items table in one dialect, which both SQL item stores run.

    ``table`` as a statement names it (SQLite: the plain name; Postgres: quoted),
    ``mark`` the placeholder, ``no_limit`` the LIMIT that reads every row
    (SQLite -1, Postgres NULL). A put over an expired row starts it again (a new
    ``created_at``); an add (``if_absent``) inserts, or takes over a row that has
    expired (it is gone for readers).
    """

    def __init__(self, table: str, mark: str, *, no_limit: int | None) -> None:
        self.table, self.mark, self.no_limit = table, mark, no_limit
        upsert = (
            f"INSERT INTO {table} AS i ({ITEM_COLUMNS}) VALUES ({', '.join([mark] * 7)}) "
            "ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value, "
        )
        in_range = f"ns >= {mark} AND ns < {mark}"
        self.delete = f"DELETE FROM {table} WHERE ns = {mark} AND key = {mark} RETURNING expires_at"
        self.put = upsert + (
            "updated_at = excluded.updated_at, expires_at = excluded.expires_at, "
            "ttl_seconds = excluded.ttl_seconds, created_at = CASE WHEN "
            "i.expires_at <= excluded.updated_at THEN excluded.created_at ELSE i.created_at END"
        )
        self.add = upsert + (
            "created_at = excluded.created_at, updated_at = excluded.updated_at, "
            "expires_at = excluded.expires_at, ttl_seconds = excluded.ttl_seconds "
            "WHERE i.expires_at <= excluded.updated_at"
        )
        # if_value: the live item holding exactly the value read (a compare-and-set).
        same = f"ns = {mark} AND key = {mark} AND value = {mark} AND {self.live}"
        self.swap = (
            f"UPDATE {table} SET value = {mark}, updated_at = {mark}, expires_at = {mark}, "
            f"ttl_seconds = {mark} WHERE {same}"
        )
        self.delete_same = f"DELETE FROM {table} WHERE {same}"
        self.namespaces = f"SELECT DISTINCT ns FROM {table} WHERE {in_range} AND {self.live} ORDER BY ns"
        self.delete_prefix = f"DELETE FROM {table} WHERE {in_range}"
        self.purge = f"DELETE FROM {table} WHERE expires_at <= {mark}"

    @property
    def live(self) -> str:
        """Items not expired at a moment (one parameter)."""
        return f"(expires_at IS NULL OR expires_at > {self.mark})"

    def select(self, where: str) -> str:
        """The live items matching ``where`` (its parameters, then the moment)."""
        return f"SELECT {ITEM_COLUMNS} FROM {self.table} WHERE {where} AND {self.live}"

    def write(self, conn: Any, batch: Sequence[ItemWrite], now: float) -> list[bool]:
        """Apply a checked batch on ``conn`` (inside the caller's transaction); for
        each write, whether it changed anything."""
        changed: list[bool] = []
        for w in batch:
            ns = encode_namespace(w.namespace)
            if w.if_value is not None:
                changed.append(self._swap(conn, ns, w, now))
                continue
            if w.value is None:
                rows = conn.execute(self.delete, (ns, w.key)).fetchall()
                changed.append(any(r[0] is None or r[0] > now for r in rows))
                continue
            params = (ns, w.key, w.value, now, now, expiry(now, w.ttl_seconds), w.ttl_seconds)
            cursor = conn.execute(self.add if w.if_absent else self.put, params)
            changed.append(cursor.rowcount == 1)
        return changed

    def write_guarded(self, conn: Any, batch: Sequence[ItemWrite], now: float) -> None:
        """Apply a checked batch on ``conn`` inside the caller's transaction, raising
        :class:`GuardFailed` (so the caller rolls back) when a conditional write
        does not apply. A row another transaction changes meanwhile is read again
        after it commits (Postgres re-checks the condition: no lost update)."""
        for write, done in zip(batch, self.write(conn, batch, now), strict=True):
            if write.conditional and not done:
                raise GuardFailed

    def _swap(self, conn: Any, ns: str, w: ItemWrite, now: float) -> bool:
        if w.value is None:
            return bool(conn.execute(self.delete_same, (ns, w.key, w.if_value, now)).rowcount == 1)
        params = (w.value, now, expiry(now, w.ttl_seconds), w.ttl_seconds, ns, w.key, w.if_value, now)
        return bool(conn.execute(self.swap, params).rowcount == 1)

    def scan(self, scan: ItemScan) -> tuple[str, list[Any]]:
        """The SELECT of a checked scan and its parameters."""
        mark = self.mark
        if scan.exact:
            where, params = f"ns = {mark}", [scan.low]
        else:
            where, params = f"ns >= {mark} AND ns < {mark}", [scan.low, scan.high]
        if scan.before is not None:
            where += f" AND key < {mark}"
            params.append(scan.before)
        order = "DESC" if scan.descending else "ASC"
        query = self.select(where) + f" ORDER BY ns {order}, key {order} LIMIT {mark} OFFSET {mark}"
        limit = self.no_limit if scan.limit is None else scan.limit
        return query, [*params, time.time(), limit, scan.offset]
