"""Learning: durable facts extracted from conversations and mined from traces.

:mod:`fastaiagent.learn.extractor` asks an LLM for facts; :mod:`fastaiagent.learn.loop`
is the ``fastaiagent learn`` job over stored traces. The fact stores themselves
live in :mod:`fastaiagent.facts`; they are re-exported here because the spec
imports them from this package (``from fastaiagent.learn import PostgresFactStore``).
"""

from __future__ import annotations

from fastaiagent import facts
from fastaiagent._lazy import LazyNames
from fastaiagent.facts import (  # noqa: F401 (exported: this package's __all__ is facts')
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

# Every other name of fastaiagent.facts (its Postgres and Redis stores) is taken from
# there when first used, so they are loaded as lazily here as there.
__getattr__ = LazyNames(__name__, dict.fromkeys(facts.__all__, facts.__name__)).__getattr__
__all__ = list(facts.__all__)
