"""Bad time input is refused at the boundary with a clear error and writes nothing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from fastaiagent import Memory
from fastaiagent.agent.memory_blocks.persistent import PersistentFactBlock
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.sqlite.store import SQLiteFactStore

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


@pytest.fixture
def mem(tmp_path) -> Memory:  # type: ignore[no-untyped-def]
    return Memory(location=f"sqlite:///{tmp_path}/m.db", user_id="alice", clock=lambda: NOW)


def test_bad_ttl_and_validity_are_refused_and_nothing_is_written(mem: Memory) -> None:
    with pytest.raises(ValueError, match="ttl must be > 0"):
        mem.persist("x", ttl=-5)
    with pytest.raises(TypeError, match="ttl must be a timedelta or seconds"):
        mem.persist("x", ttl="1h")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pass ttl= or valid_to=, not both"):
        mem.persist("x", ttl=60, valid_to=NOW + timedelta(hours=1))
    with pytest.raises(ValueError, match="must be after valid_from"):
        mem.persist("x", valid_from=NOW, valid_to=NOW)
    with pytest.raises(TypeError, match="valid_to must be a datetime or UNIX seconds"):
        mem.persist("x", valid_to="friday")  # type: ignore[arg-type]
    assert mem.retrieve(include_expired=True) == []


def test_as_of_is_a_plain_read(mem: Memory) -> None:
    with pytest.raises(TypeError, match="as_of must be a datetime or UNIX seconds"):
        mem.retrieve(as_of="yesterday")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="use it without query= and include_expired="):
        mem.retrieve(as_of=NOW, include_expired=True)


def test_memory_keywords_are_checked_at_construction(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TypeError, match="fact_ttl must be a timedelta or seconds"):
        Memory(location=f"sqlite:///{tmp_path}/m.db", fact_ttl="30d")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fact_ttl must be > 0"):
        Memory(location=f"sqlite:///{tmp_path}/m.db", fact_ttl=timedelta(0))
    with pytest.raises(TypeError, match="clock must be a callable"):
        Memory(location=f"sqlite:///{tmp_path}/m.db", clock=5)  # type: ignore[arg-type]


def test_a_naive_datetime_is_read_as_utc(mem: Memory) -> None:
    mem.persist("Away", valid_to=datetime(2026, 12, 2))
    (fact,) = mem.retrieve()
    assert fact.valid_to == datetime(2026, 12, 2, tzinfo=timezone.utc).timestamp()


def test_a_cached_fact_block_drops_facts_that_expired_since_its_refresh(tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = SQLiteFactStore(tmp_path / "f.db")
    now = [NOW.timestamp()]
    store.add(Fact("Short-lived", scope="user", scope_id="u", created_at=now[0], valid_to=now[0] + 10))
    block = PersistentFactBlock("user", "u", store=store, refresh_every=5, clock=lambda: now[0])
    assert [f.fact for f in block.fetch()] == ["Short-lived"]
    now[0] += 10
    assert block.fetch() == []  # served from the cache, without the expired fact


def test_semantic_search_leaves_expired_facts_out(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from _vector_fakes import WordHashEmbedder

    from fastaiagent.kb.backends.faiss import FaissVectorStore

    now = [NOW]
    embedder = WordHashEmbedder()
    mem = Memory(
        location=f"sqlite:///{tmp_path}/s.db",
        user_id="alice",
        semantic=FaissVectorStore(dimension=embedder.dimension),
        embedder=embedder,
        clock=lambda: now[0],
    )
    mem.persist("Coffee order: oat flat white", ttl=timedelta(days=1))
    mem.persist("Coffee order: espresso")
    assert {f.fact for f in mem.retrieve("coffee order")} == {
        "Coffee order: oat flat white",
        "Coffee order: espresso",
    }
    now[0] += timedelta(days=1)
    assert [f.fact for f in mem.retrieve("coffee order")] == ["Coffee order: espresso"]
    found = mem.retrieve("coffee order", include_expired=True)
    assert {f.fact for f in found} == {"Coffee order: oat flat white", "Coffee order: espresso"}
