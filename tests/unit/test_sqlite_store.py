"""MemoryStore specifics: lazy absolute default path (acceptance H14), WAL, per-thread connections."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from fastaiagent.errors import NotFoundError
from fastaiagent.learn import Fact, MemoryStore


def test_constructing_creates_no_file(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FASTAIAGENT_LOCAL_DB")
    MemoryStore()
    assert list(tmp_path.iterdir()) == []


def test_default_path_is_resolved_once_and_a_chdir_does_not_move_it(tmp_path, monkeypatch) -> None:
    """Acceptance H14: the default ./.fastaiagent/local.db is fixed, absolute, at first use."""
    monkeypatch.delenv("FASTAIAGENT_LOCAL_DB")
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    store = MemoryStore()
    fact_id = store.add(Fact("kept here", scope="user", scope_id="u"))
    monkeypatch.chdir(second)
    assert store.path == (first / ".fastaiagent" / "local.db").resolve()
    assert store.path.is_absolute()
    assert store.get(fact_id) is not None
    store.add(Fact("also here", scope="user", scope_id="u"))
    assert not (second / ".fastaiagent").exists()
    store.close()


def test_env_var_overrides_the_default(tmp_path, monkeypatch) -> None:
    target = tmp_path / "elsewhere" / "facts.db"
    monkeypatch.setenv("FASTAIAGENT_LOCAL_DB", str(target))
    store = MemoryStore()
    store.add(Fact("x", scope="user", scope_id="u"))
    assert store.path == target.resolve() and target.exists()
    store.close()


def test_relative_explicit_path_is_made_absolute_at_first_use(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = MemoryStore("rel.db")
    store.add(Fact("x", scope="user", scope_id="u"))
    os.chdir("/")
    assert store.path == (tmp_path / "rel.db").resolve()
    store.close()


def test_wal_and_partial_indexes(tmp_path) -> None:
    store = MemoryStore(tmp_path / "f.db")
    store.add(Fact("x", scope="user", scope_id="u"))
    conn = sqlite3.connect(tmp_path / "f.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    plan = " ".join(  # the per-turn read: validity checked on index entries only
        str(r)
        for r in conn.execute(
            "EXPLAIN QUERY PLAN SELECT fact, created_at, valid_from, valid_to FROM learned_memory "
            "WHERE scope_id='u' AND scope='user' AND project_id='' AND superseded_by IS NULL "
            "AND (valid_to IS NULL OR valid_to > 5) ORDER BY created_at DESC, id DESC LIMIT 50"
        )
    )
    assert "COVERING INDEX idx_learned_memory_subject_live" in plan
    conn.close()
    store.close()


def test_one_connection_per_thread_reused(tmp_path) -> None:
    store = MemoryStore(tmp_path / "f.db")
    store.add(Fact("x", scope="user", scope_id="u"))
    main = store._connection()
    assert store._connection() is main
    seen: list[sqlite3.Connection] = []

    def worker() -> None:
        store.list_active("user", "u")
        seen.append(store._connection())
        seen.append(store._connection())

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen[0] is seen[1] and seen[0] is not main
    store.close()


def test_close_then_reopen(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "f.db")
    fact_id = store.add(Fact("x", scope="user", scope_id="u"))
    store.close()
    assert store.get(fact_id) is not None
    store.close()


def test_explicit_path_in_a_missing_folder_is_not_created(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "missing" / "f.db")  # constructing checks nothing yet
    with pytest.raises(NotFoundError, match=r"folder '.*missing' for the SQLite database 'f.db'"):
        store.add(Fact("x", scope="user", scope_id="u"))
    assert not (tmp_path / "missing").exists()
    (tmp_path / "missing").mkdir()  # the fix the message names
    assert store.add(Fact("x", scope="user", scope_id="u")) == 1
    store.close()


def test_default_location_creates_its_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FASTAIAGENT_LOCAL_DB")
    store = MemoryStore()
    store.add(Fact("x", scope="user", scope_id="u"))
    assert (tmp_path / ".fastaiagent" / "local.db").exists()
    store.close()


def test_a_forked_child_opens_connections_of_its_own(tmp_path: Path) -> None:
    import multiprocessing

    store = MemoryStore(tmp_path / "facts.db")
    store.add(Fact("from the parent", scope="user", scope_id="ann"))
    parent_conn = store._connection()

    def child(out: Any) -> None:
        out.put(store._connection() is parent_conn)
        store.add(Fact("from the child", scope="user", scope_id="ann"))
        out.put([f.fact for f in store.list_active("user", "ann")])

    context = multiprocessing.get_context("fork")
    out = context.Queue()
    process = context.Process(target=child, args=(out,))
    process.start()
    shared, seen = out.get(timeout=30), out.get(timeout=30)
    process.join(30)
    assert process.exitcode == 0 and shared is False
    assert seen == ["from the child", "from the parent"]
    assert [f.fact for f in store.list_active("user", "ann")] == ["from the child", "from the parent"]
    store.close()


def test_get_many_reads_each_existing_fact_by_id_superseded_ones_too(tmp_path) -> None:
    store = MemoryStore(str(tmp_path / "m.db"))
    old = store.add(Fact("lives in Paris", scope="user", scope_id="u"))
    new = store.add(Fact("lives in Rome", scope="user", scope_id="u"))
    other = store.add(Fact("lives in Oslo", scope="user", scope_id="v"))
    store.supersede(old, new)
    found = store.get_many([new, old, 999_999, new])
    assert set(found) == {old, new}  # a missing id is left out, a repeated one read once
    assert found[new].fact == "lives in Rome" and found[new].active
    assert found[old].fact == "lives in Paris" and not found[old].active
    assert found[old] == store.get(old) and store.get_many([]) == {}
    assert store.get_many([other])[other].scope_id == "v"
