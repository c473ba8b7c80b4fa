"""Durable facts: the Fact record, scoping rules, the FactStore contract and its stores.

``SQLiteFactStore`` (the default), ``PostgresFactStore`` and ``RedisFactStore``
implement :class:`FactStore`; :mod:`fastaiagent.facts.conformance.facts` checks any
implementation. The Postgres and Redis stores import their drivers only when
used, so this package imports with no extras installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastaiagent._lazy import LazyNames
from fastaiagent.facts.fact import (
    SCOPES,
    SOURCE_CONVERSATION,
    SOURCE_MANUAL,
    SOURCE_TRACES,
    SOURCES,
    Fact,
)
from fastaiagent.facts.factory import make_fact_store
from fastaiagent.facts.scoping import WILDCARD, normalize_text
from fastaiagent.facts.sqlite.store import MemoryStore, SQLiteFactStore
from fastaiagent.facts.store import FactStore, SubjectCount

if TYPE_CHECKING:
    from fastaiagent.facts.postgres.store import PostgresFactStore
    from fastaiagent.facts.redis.store import RedisFactStore

__getattr__ = LazyNames(
    __name__,
    {
        "PostgresFactStore": "fastaiagent.facts.postgres.store",
        "RedisFactStore": "fastaiagent.facts.redis.store",
    },
).__getattr__

__all__ = [
    "SCOPES",
    "SOURCES",
    "SOURCE_CONVERSATION",
    "SOURCE_MANUAL",
    "SOURCE_TRACES",
    "WILDCARD",
    "Fact",
    "FactStore",
    "MemoryStore",
    "PostgresFactStore",
    "RedisFactStore",
    "SQLiteFactStore",
    "SubjectCount",
    "make_fact_store",
    "normalize_text",
]
