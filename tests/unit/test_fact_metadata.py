"""Stored metadata text read back as a dict: each fact gets its own."""

from __future__ import annotations

from pathlib import Path

from fastaiagent.facts.fact import Fact, metadata_from_text
from fastaiagent.facts.sqlite.store import SQLiteFactStore


def test_each_read_returns_its_own_dict() -> None:
    first, second = metadata_from_text('{"agent_id": "support"}'), metadata_from_text('{"agent_id": "support"}')
    assert first == second == {"agent_id": "support"}
    first["agent_id"] = "changed"
    assert metadata_from_text('{"agent_id": "support"}') == {"agent_id": "support"}
    nested = [metadata_from_text('{"tags": ["a"]}') for _ in range(2)]
    nested[0]["tags"].append("b")
    assert nested[1] == {"tags": ["a"]}  # nested values are never shared
    assert metadata_from_text(None) == metadata_from_text("") == metadata_from_text("{}") == {}


def test_facts_read_from_a_store_do_not_share_metadata(tmp_path: Path) -> None:
    store = SQLiteFactStore(tmp_path / "m.db")
    for text in ("likes tea", "lives in Oslo"):
        store.add(Fact(text, scope="user", scope_id="ann", metadata={"agent_id": "support"}))
    facts = store.list_active("user", "ann")
    facts[0].metadata["agent_id"] = "mutated"
    assert [f.metadata for f in store.list_active("user", "ann")] == [{"agent_id": "support"}] * 2
    assert facts[1].metadata == {"agent_id": "support"}
    store.close()


def test_a_copy_with_other_metadata_leaves_the_original_as_it_was() -> None:
    original = Fact("likes tea", scope="user", scope_id="ann", metadata={"a": "1"}, created_at=5.0)
    copy = original.with_metadata({"a": "1", "agent_id": "support"})
    assert copy == Fact("likes tea", scope="user", scope_id="ann", metadata={"a": "1", "agent_id": "support"}, created_at=5.0)
    assert original.metadata == {"a": "1"} and copy is not original
    copy.fact = "edited"
    assert original.fact == "likes tea"
