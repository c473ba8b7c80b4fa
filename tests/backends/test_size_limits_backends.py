"""The size limits hold on every backend (they live in facts/scoping.py)."""

from __future__ import annotations

from typing import Any

import pytest

from fastaiagent import Memory
from fastaiagent.errors import InvalidValueError


def _stores(request: pytest.FixtureRequest, kind: str) -> Any:
    if kind == "postgres":
        from fastaiagent.facts.postgres.store import PostgresFactStore

        return PostgresFactStore(
            request.getfixturevalue("postgres_url"), table=request.getfixturevalue("pg_table")
        )
    from fastaiagent.facts.redis.store import RedisFactStore

    return RedisFactStore(
        request.getfixturevalue("redis_url"), prefix=request.getfixturevalue("redis_prefix")
    )


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("redis", marks=pytest.mark.redis),
    ],
)
def test_big_metadata_and_text_are_refused_and_nothing_is_stored(
    request: pytest.FixtureRequest, kind: str
) -> None:
    store = _stores(request, kind)
    memory = Memory(location=store)
    try:
        with pytest.raises(
            InvalidValueError, match=r"metadata is .* the limit is 16,384.*MAX_METADATA_BYTES"
        ):
            memory.persist(
                "blob", tier="user", id="alice", metadata={"b": "y" * (10 * 1024 * 1024)}
            )
        with pytest.raises(InvalidValueError, match="MAX_FACT_CHARS"):
            memory.persist("x" * 10_001, tier="user", id="alice")
        assert memory.retrieve(tier="user", id="alice") == []
        memory.persist("fits", tier="user", id="alice", metadata={"n": "z" * 16_000})
        assert memory.retrieve(tier="user", id="alice")[0].metadata == {"n": "z" * 16_000}
    finally:
        store.close()
