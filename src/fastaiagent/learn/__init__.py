"""Durable facts: the Fact record, the FactStore contract and its backends.

The Postgres and Redis stores import their drivers only when used, so this
package imports with no extras installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastaiagent.learn.factory import make_fact_store
from fastaiagent.learn.models import (
    SCOPES,
    SOURCE_LEARNED,
    SOURCE_MANUAL,
    SOURCE_TRACE_LOOP,
    Fact,
)
from fastaiagent.learn.scoping import WILDCARD, normalize_text
from fastaiagent.learn.sqlite import MemoryStore
from fastaiagent.learn.store import FactStore, SubjectCount

if TYPE_CHECKING:
    from fastaiagent.learn.postgres import PostgresFactStore
    from fastaiagent.learn.redis import RedisFactStore

_LAZY = {
    "PostgresFactStore": "fastaiagent.learn.postgres",
    "RedisFactStore": "fastaiagent.learn.redis",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'fastaiagent.learn' has no attribute {name!r}")


__all__ = [
    "SCOPES",
    "SOURCE_LEARNED",
    "SOURCE_MANUAL",
    "SOURCE_TRACE_LOOP",
    "WILDCARD",
    "Fact",
    "FactStore",
    "MemoryStore",
    "PostgresFactStore",
    "RedisFactStore",
    "SubjectCount",
    "make_fact_store",
    "normalize_text",
]
