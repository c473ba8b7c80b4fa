"""The per-turn read kept per thread (facts/sqlite/subject_reads.py): a repeated read
of an unchanged file runs no query, and every change shows at once, whoever
makes it: this connection, another thread, another store object, another
process; validity still moves with the clock; a caller's edits never leak."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fastaiagent.learn import Fact, MemoryStore


@pytest.fixture
def store(tmp_path: Path):
    opened = MemoryStore(tmp_path / "facts.db")
    opened.add(Fact("likes tea", scope="user", scope_id="ann", metadata={"agent_id": "a"}))
    yield opened
    opened.close()


def texts(store: MemoryStore, **options) -> list[str]:
    return [fact.fact for fact in store.list_active("user", "ann", **options)]


def queries(store: MemoryStore) -> list[str]:
    """The statements this thread's connection runs from now on."""
    ran: list[str] = []
    store._connection().set_trace_callback(ran.append)
    return ran


def test_a_repeated_read_of_an_unchanged_file_runs_no_query(store: MemoryStore) -> None:
    for _ in range(2):  # the first read keeps what it read
        assert texts(store) == ["likes tea"]
    ran = queries(store)
    assert texts(store) == ["likes tea"]
    assert ran == ["PRAGMA data_version"]


def test_this_connection_s_writes_show_at_once(store: MemoryStore) -> None:
    for _ in range(3):
        texts(store)
    fact_id = store.add(Fact("likes coffee", scope="user", scope_id="ann"))
    assert texts(store) == ["likes coffee", "likes tea"]
    store.delete("user", "ann", fact_id=fact_id)
    assert texts(store) == ["likes tea"]


def test_another_thread_s_and_another_store_s_writes_show_at_once(
    store: MemoryStore, tmp_path: Path
) -> None:
    for _ in range(3):
        texts(store)
    writer = threading.Thread(
        target=lambda: store.add(Fact("from a thread", scope="user", scope_id="ann"))
    )
    writer.start()
    writer.join()
    assert texts(store)[0] == "from a thread"
    other = MemoryStore(tmp_path / "facts.db")
    other.add(Fact("from another store", scope="user", scope_id="ann"))
    other.close()
    assert texts(store)[0] == "from another store"


def test_another_process_s_writes_show_at_once(store: MemoryStore, tmp_path: Path) -> None:
    for _ in range(3):
        texts(store)
    code = (
        "import sys; from fastaiagent.learn import Fact, MemoryStore; "
        "s = MemoryStore(sys.argv[1]); s.add(Fact('from a process', scope='user', scope_id='ann')); s.close()"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "facts.db")], check=True)
    assert texts(store)[0] == "from a process"


def test_validity_moves_with_the_clock_between_kept_reads(store: MemoryStore) -> None:
    store.add(Fact("on call this week", scope="user", scope_id="ann", valid_from=100.0, valid_to=200.0))
    for _ in range(3):
        assert texts(store, now=150.0) == ["on call this week", "likes tea"]
    assert texts(store, now=250.0) == ["likes tea"]
    assert texts(store, now=50.0) == ["likes tea"]
    assert texts(store, now=250.0, include_expired=True) == ["on call this week", "likes tea"]


def test_a_caller_s_edits_never_reach_the_next_read(store: MemoryStore) -> None:
    for _ in range(3):
        read = store.list_active("user", "ann")
    read[0].metadata["agent_id"] = "edited"
    read[0].fact = "edited"
    again = store.list_active("user", "ann")
    assert again[0].fact == "likes tea" and again[0].metadata == {"agent_id": "a"}


def test_subjects_and_pages_are_kept_apart(store: MemoryStore) -> None:
    store.add(Fact("likes jazz", scope="user", scope_id="bob"))
    store.add(Fact("likes rain", scope="user", scope_id="ann"))
    for _ in range(3):
        assert texts(store, limit=1) == ["likes rain"]
        assert texts(store) == ["likes rain", "likes tea"]
        assert texts(store, limit=1, offset=1) == ["likes tea"]
        assert [f.fact for f in store.list_active("user", "bob")] == ["likes jazz"]


def test_a_write_to_another_subject_keeps_the_read(store: MemoryStore) -> None:
    for _ in range(3):
        texts(store)
    store.add(Fact("likes jazz", scope="user", scope_id="bob"))
    ran = queries(store)
    assert texts(store) == ["likes tea"]
    assert ran == ["PRAGMA data_version"]  # answered from memory: bob's write is not ann's
    assert [f.fact for f in store.list_active("user", "bob")] == ["likes jazz"]


def test_a_write_to_another_table_of_the_file_keeps_the_read(store: MemoryStore) -> None:
    from fastaiagent.facts.items import ItemWrite
    from fastaiagent.facts.sqlite.items import SQLiteItemStore

    items = SQLiteItemStore(store, table="reads_items")
    assert items.write([ItemWrite(("ns",), "k", '{"v": 1}')]) == [True]  # makes the table
    for _ in range(3):
        texts(store)
    assert items.write([ItemWrite(("ns",), "k", '{"v": 2}')]) == [True]
    ran = queries(store)
    assert texts(store) == ["likes tea"]
    assert ran == ["PRAGMA data_version"]


def test_the_read_after_this_connection_s_write_is_answered_from_memory(store: MemoryStore) -> None:
    texts(store)  # a read from the file is kept at once
    store.add(Fact("likes coffee", scope="user", scope_id="ann"))
    ran = queries(store)
    assert texts(store) == ["likes coffee", "likes tea"]
    assert ran == ["PRAGMA data_version"]  # the write went into the kept rows


def test_a_new_subject_is_kept_from_its_first_write(store: MemoryStore) -> None:
    store.add(Fact("likes jazz", scope="user", scope_id="cat"))
    store.add(Fact("likes rain", scope="user", scope_id="cat"))
    ran = queries(store)
    assert [f.fact for f in store.list_active("user", "cat")] == ["likes rain", "likes jazz"]
    assert ran == ["PRAGMA data_version"]


def from_file(store: MemoryStore, scope_id: str, **options) -> list[Fact]:
    """The subject's facts as a store that keeps nothing yet reads them."""
    fresh = MemoryStore(store.path)
    try:
        return fresh.list_active("user", scope_id, **options)
    finally:
        fresh.close()


def same(read: list[Fact], expected: list[Fact]) -> bool:
    """Equal facts, field types too (1 and 1.0 compare equal, a REAL reads as 1.0)."""
    return [repr(fact) for fact in read] == [repr(fact) for fact in expected] and len(read) > 0


def test_kept_rows_read_as_the_file_does_after_every_kind_of_write(store: MemoryStore) -> None:
    for limit in (None, 2):
        texts(store, limit=limit)
    writes = [
        Fact("likes jazz", scope="user", scope_id="ann", metadata={"agent_id": "a"}),
        Fact("no metadata", scope="user", scope_id="ann", confidence=1, created_at=5),  # older: sorts last
        Fact("other metadata", scope="user", scope_id="ann", metadata={"n": [1, 2]}, source="learn"),
        Fact("from a run", scope="user", scope_id="ann", source="learned", source_trace_id="t1", confidence=0.6),
        Fact("on call", scope="user", scope_id="ann", valid_from=100.0, valid_to=2e10),
    ]
    for fact in writes:
        store.add(fact)
        if fact.valid_to is None:  # bounds are read from the file at the clock
            ran = queries(store)
            store.list_active("user", "ann")
            assert ran == ["PRAGMA data_version"]
        for options in ({}, {"limit": 2}, {"limit": 3}, {"limit": None}, {"include_expired": True}):
            assert same(store.list_active("user", "ann", **options), from_file(store, "ann", **options))
    (jazz,) = [f for f in store.list_active("user", "ann") if f.fact == "likes jazz"]
    assert jazz.id is not None
    store.update(Fact("likes free jazz", scope="user", scope_id="ann"), jazz.id)  # the old one goes
    store.add(Fact("on call", scope="user", scope_id="ann", created_at=3e10))  # replaces the expired row
    for options in ({}, {"limit": 2}, {"limit": None}, {"include_expired": True}, {"now": 3e10}):
        assert same(store.list_active("user", "ann", **options), from_file(store, "ann", **options))


def test_a_fact_read_from_memory_has_every_field_of_one_read_by_id(store: MemoryStore) -> None:
    import dataclasses

    for _ in range(2):
        (read,) = store.list_active("user", "ann")
        assert read.id is not None
        assert vars(read).keys() == {field.name for field in dataclasses.fields(Fact)}
        assert read == store.get(read.id)


def test_another_store_s_write_between_this_connection_s_writes_shows(
    store: MemoryStore, tmp_path: Path
) -> None:
    texts(store)
    other = MemoryStore(tmp_path / "facts.db")
    other.add(Fact("from another store", scope="user", scope_id="ann"))
    other.close()
    store.add(Fact("likes coffee", scope="user", scope_id="ann"))
    assert texts(store) == ["likes coffee", "from another store", "likes tea"]


def test_an_update_and_an_unreported_write_show_at_once(store: MemoryStore) -> None:
    bob = store.add(Fact("likes jazz", scope="user", scope_id="bob"))
    for _ in range(3):
        texts(store)
        store.list_active("user", "bob")
    (tea,) = store.list_active("user", "ann")
    assert tea.id is not None
    store.update(Fact("likes green tea", scope="user", scope_id="ann"), tea.id)
    assert texts(store) == ["likes green tea"]
    store.delete("user", "bob", fact_id=bob)  # a delete reports nothing: every read drops
    assert store.list_active("user", "bob") == []
    assert texts(store) == ["likes green tea"]


def test_a_write_past_a_kept_first_page_is_left_to_the_file(tmp_path: Path) -> None:
    writer = MemoryStore(tmp_path / "facts.db")
    for n, text in enumerate(["likes tea", "likes jazz", "likes rain"]):
        writer.add(Fact(text, scope="user", scope_id="ann", created_at=100.0 + n))
    writer.close()
    store = MemoryStore(tmp_path / "facts.db")
    assert texts(store, limit=2) == ["likes rain", "likes jazz"]  # kept: the first two only
    store.add(Fact("likes snow", scope="user", scope_id="ann", created_at=5.0))  # older than all
    assert texts(store, limit=3) == ["likes rain", "likes jazz", "likes tea"]
    assert texts(store, limit=None) == ["likes rain", "likes jazz", "likes tea", "likes snow"]
    store.close()


def test_writes_without_a_read_between_show_in_order(store: MemoryStore) -> None:
    texts(store)
    jazz = store.add(Fact("likes jazz", scope="user", scope_id="ann"))
    store.update(Fact("likes free jazz", scope="user", scope_id="ann"), jazz)  # added, then gone
    store.add(Fact("older", scope="user", scope_id="ann", created_at=5))
    store.add(Fact("likes rain", scope="user", scope_id="ann", metadata={"n": [1]}, source="learn"))
    store.add(Fact("likes tea", scope="user", scope_id="ann"))  # already there: no change
    ran = queries(store)
    read = store.list_active("user", "ann")
    assert ran == ["PRAGMA data_version"]
    assert [f.fact for f in read] == ["likes rain", "likes free jazz", "likes tea", "older"]
    assert same(read, from_file(store, "ann"))


def test_many_writes_without_a_read_keep_the_newest_rows(store: MemoryStore) -> None:
    from fastaiagent.facts.sqlite.subject_reads import HELD_ROWS

    texts(store)
    for n in range(2 * HELD_ROWS + 50):
        store.add(Fact(f"fact {n}", scope="user", scope_id="ann"))
    ran = queries(store)
    assert same(store.list_active("user", "ann", limit=50), from_file(store, "ann", limit=50))
    assert ran == ["PRAGMA data_version"]  # the newest rows are kept
    everything = store.list_active("user", "ann", limit=None)
    assert len(everything) == 2 * HELD_ROWS + 51 and same(everything, from_file(store, "ann", limit=None))


def test_another_store_s_write_after_this_connection_s_write_drops_what_it_noted(
    store: MemoryStore, tmp_path: Path
) -> None:
    texts(store)
    store.add(Fact("likes coffee", scope="user", scope_id="ann"))
    other = MemoryStore(tmp_path / "facts.db")
    tea = other.find_active("user", "ann", "", "likes tea")
    assert tea is not None and tea.id is not None
    other.update(Fact("likes green tea", scope="user", scope_id="ann"), tea.id)
    other.close()
    assert texts(store) == ["likes green tea", "likes coffee"]


def test_a_write_rolled_back_leaves_nothing_behind(store: MemoryStore) -> None:
    from fastaiagent.errors import FastAIAgentError

    texts(store)
    with pytest.raises(FastAIAgentError):  # the new fact is inserted, then the update fails
        store.update(Fact("likes coffee", scope="user", scope_id="ann"), 999_999)
    assert texts(store) == ["likes tea"]
    assert store.find_active("user", "ann", "", "likes coffee") is None


def test_writes_to_a_subject_with_rows_not_kept_ask_nothing_more(store: MemoryStore) -> None:
    fresh = MemoryStore(store.path)  # keeps nothing of ann, who has a fact
    try:
        fresh.add(Fact("likes jazz", scope="user", scope_id="ann"))
        ran = queries(fresh)
        fresh.add(Fact("likes rain", scope="user", scope_id="ann"))
        assert ran == ["BEGIN IMMEDIATE", ran[1], "COMMIT"] and ran[1].startswith("INSERT")
        assert [f.fact for f in fresh.list_active("user", "ann")] == ["likes rain", "likes jazz", "likes tea"]
    finally:
        fresh.close()
