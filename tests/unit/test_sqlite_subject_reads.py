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
    for _ in range(3):  # the first after a write is not kept, the next one is
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


def test_the_first_read_after_a_write_goes_straight_to_the_file(store: MemoryStore) -> None:
    for _ in range(3):
        texts(store)
    store.add(Fact("likes coffee", scope="user", scope_id="ann"))
    ran = queries(store)
    assert texts(store) == ["likes coffee", "likes tea"]
    assert len(ran) == 1 and ran[0].startswith("SELECT")  # no PRAGMA, nothing kept
    assert texts(store) == ["likes coffee", "likes tea"]  # the second read keeps
    assert texts(store) == ["likes coffee", "likes tea"]
    assert ran[-1] == "PRAGMA data_version"


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
