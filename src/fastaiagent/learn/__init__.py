"""Learning: durable facts extracted from conversations and mined from traces.

:mod:`fastaiagent.learn.extractor` asks an LLM for facts; :mod:`fastaiagent.learn.loop`
is the ``fastaiagent learn`` job over stored traces. The fact stores themselves
live in :mod:`fastaiagent.facts`; they are re-exported here because the spec
imports them from this package (``from fastaiagent.learn import PostgresFactStore``).
"""

from __future__ import annotations

from typing import Any

from fastaiagent import facts as _facts
from fastaiagent.facts import (
    SCOPES,
    SOURCE_CONVERSATION,
    SOURCE_MANUAL,
    SOURCE_TRACES,
    WILDCARD,
    Fact,
    FactStore,
    MemoryStore,
    SQLiteFactStore,
    SubjectCount,
    make_fact_store,
    normalize_text,
)


def __getattr__(name: str) -> Any:
    if name in ("PostgresFactStore", "RedisFactStore"):
        return getattr(_facts, name)
    raise AttributeError(f"module 'fastaiagent.learn' has no attribute {name!r}")


__all__ = [
    "SCOPES",
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
