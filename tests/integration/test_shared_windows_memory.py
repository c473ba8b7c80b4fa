"""Memory(window_store=...) as a user sees it: two Memory objects stand in for two workers.

Backend-parametrised tests run on the real SQLite file, Postgres and Redis
(names unique per run; missing servers fail under CI=true).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest
from test_shared_windows import make_memory, spec  # noqa: F401  (spec is a fixture)

from _wait import wait_until
from fastaiagent.agent.agent import Agent
from fastaiagent.agent.deprecation import deprecation_note
from fastaiagent.agent.memory import Memory
from fastaiagent.agent.memory_blocks.summary import render_summary
from fastaiagent.agent.windows import WindowKey
from fastaiagent.facts.sqlite.store import MemoryStore
from fastaiagent.facts.sqlite.windows import SQLiteWindowStore
from fastaiagent.llm.message import Message
from fastaiagent.testing import CannedLLM, FunctionLLM


def _ack(messages: list[Message]) -> str:
    return "ack " + (messages[-1].content or "")


def _agent(memory: Memory) -> Agent:
    return Agent("a", llm=FunctionLLM(_ack), memory=memory)


def _window(memory: Memory, user: str) -> list[str | None]:
    return [m.content for m in memory.for_user(user).messages]


# -- on every backend -------------------------------------------------------------


def test_two_workers_alternate_and_both_see_every_turn(spec) -> None:  # noqa: F811
    a, b = _agent(make_memory(spec)), _agent(make_memory(spec))
    for turn in range(4):
        (a if turn % 2 == 0 else b).run(f"q{turn}", context="alice")
        (b if turn % 2 == 0 else a).run(f"bob q{turn}", context="bob")
    want = [x for t in range(4) for x in (f"q{t}", f"ack q{t}")]
    assert _window(a.memory, "alice") == want  # type: ignore[arg-type]
    assert _window(b.memory, "alice") == want  # type: ignore[arg-type]
    assert len(_window(a.memory, "bob")) == 8  # type: ignore[arg-type]


def test_a_lone_surrogate_does_not_stop_the_window_being_shared(spec) -> None:  # noqa: F811
    """JSON's "\\ud800" escape gives text no UTF-8 store takes; the message keeps
    U+FFFD in its place, and the turns after it are shared as before."""
    a, b = _agent(make_memory(spec)), _agent(make_memory(spec))
    a.run("broken \ud800 text", context="alice")
    b.run("next", context="alice")
    want = ["broken \ufffd text", "ack broken \ufffd text", "next", "ack next"]
    assert _window(a.memory, "alice") == want  # type: ignore[arg-type]
    assert _window(b.memory, "alice") == want  # type: ignore[arg-type]


def test_forget_and_drop_user_clear_the_shared_window_for_every_worker(spec) -> None:  # noqa: F811
    a, b = make_memory(spec), make_memory(spec)
    for user in ("alice", "bob", "carol"):
        _agent(a).run(f"hello from {user}", context=user)
    assert _window(b, "alice")  # b has it cached now

    b.forget(tier="user", id="alice")
    assert _window(a, "alice") == [] and _window(b, "alice") == []
    assert b.drop_user("bob") is True  # only the stored copy was there: still True
    assert _window(a, "bob") == []
    assert _window(a, "carol") == ["hello from carol", "ack hello from carol"]  # untouched
    _agent(a).run("back again", context="alice")  # a forgotten user starts over
    assert _window(b, "alice") == ["back again", "ack back again"]


def test_forget_everyone_is_scoped_to_agent_and_project(spec) -> None:  # noqa: F811
    mine, other = make_memory(spec), make_memory(spec, agent_id="other-bot")
    for user in ("alice", "bob"):
        _agent(mine).run("hi", context=user)
        _agent(other).run("hi", context=user)
    mine.forget(tier="user", id="*")
    fresh = make_memory(spec)
    assert _window(fresh, "alice") == [] and _window(fresh, "bob") == []
    assert len(_window(other, "alice")) == 2 and len(_window(other, "bob")) == 2


def test_idle_windows_expire_after_the_ttl(spec) -> None:  # noqa: F811
    memory = make_memory(spec)
    memory._windows.ttl_seconds = 1.0  # type: ignore[union-attr]
    _agent(memory).run("remember me", context="alice")
    assert _window(memory, "alice") == ["remember me", "ack remember me"]
    # the cached copy follows the store
    wait_until(lambda: _window(memory, "alice") == [], "alice's idle window expires")


# -- behaviour shared by every backend: checked on SQLite ------------------------------


class CountingStore(SQLiteWindowStore):
    """The real SQLite window store, counting how often the state had to travel."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.transfers = 0

    def load(self, key: WindowKey, known_version: str | None = None) -> Any:
        found = super().load(key, known_version)
        if found is not None and found.state is not None:
            self.transfers += 1
        return found


def test_a_cached_state_is_reused_while_the_stored_version_is_unchanged(tmp_path) -> None:
    facts = MemoryStore(tmp_path / "db.sqlite")
    store_a, store_b = CountingStore(facts), CountingStore(MemoryStore(tmp_path / "db.sqlite"))
    a = _agent(Memory(facts, user_id=str, window_store=store_a))
    b = _agent(Memory(store_b.store, user_id=str, window_store=store_b))
    for turn in range(5):
        a.run(f"q{turn}", context="alice")
    assert store_a.transfers == 0  # only its own writes: never re-read
    b.run("q5", context="alice")
    assert store_b.transfers == 1  # b had nothing cached
    a.run("q6", context="alice")
    assert store_a.transfers == 1  # b's turn changed the version: one reload
    assert len(_window(a.memory, "alice")) == 14  # type: ignore[arg-type]


def test_the_running_summary_travels_with_the_window(tmp_path) -> None:
    location = f"sqlite:///{tmp_path / 'db.sqlite'}"
    summary_a, summary_b = CannedLLM("Alice likes tea."), CannedLLM("written by b")
    seen: list[list[Message]] = []

    def reply(messages: list[Message]) -> str:
        seen.append(messages)
        return "ok"

    def memory(llm: CannedLLM) -> Memory:
        return Memory(location, user_id=str, window=2, summarize=llm, window_store="shared")

    a = Agent("a", llm=FunctionLLM(reply), memory=memory(summary_a))
    b = Agent("b", llm=FunctionLLM(reply), memory=memory(summary_b))
    for turn in range(5):  # refreshes fall due (every 5 messages) on a's turns: 0, 2, 4
        (a if turn % 2 == 0 else b).run(f"turn {turn}", context="alice")
    b.run("what do I like?", context="alice")
    assert summary_a.call_count >= 1 and summary_b.call_count == 0
    system = [m.content or "" for m in seen[-1] if m.role == "system"]
    assert render_summary("Alice likes tea.") in system  # b shows the summary a wrote


def test_validation_happens_at_construction(tmp_path) -> None:
    with pytest.raises(ValueError, match="window_store="):
        Memory(window_store="memcached://x")
    with pytest.raises(TypeError, match="window_store="):
        Memory(window_store=42)  # type: ignore[arg-type]
    for bad in (0, -5, timedelta(0)):
        with pytest.raises(ValueError, match="window_ttl must be > 0"):
            Memory(window_store="shared", window_ttl=bad)
    for wrong_type in ("1h", True):
        with pytest.raises(TypeError, match="window_ttl must be a timedelta or seconds"):
            Memory(window_store="shared", window_ttl=wrong_type)  # type: ignore[arg-type]

    plain = Memory(f"sqlite:///{tmp_path / 'x.db'}", window_store=None)
    assert plain._windows is None
    assert Memory(f"sqlite:///{tmp_path / 'x.db'}", window_store="shared")._windows is not None


def test_window_ttl_takes_seconds_or_a_timedelta(tmp_path) -> None:
    location = f"sqlite:///{tmp_path / 'x.db'}"
    assert Memory(location, window_store="shared", window_ttl=timedelta(hours=2)).config.window_ttl == 7200.0
    assert Memory(location, window_store="shared", window_ttl=None).config.window_ttl is None
    assert Memory(location).config.window_ttl == 7 * 24 * 3600.0


def test_the_old_spellings_windows_and_window_ttl_seconds_still_work(tmp_path) -> None:
    location = f"sqlite:///{tmp_path / 'x.db'}"
    with pytest.warns(DeprecationWarning) as said:
        memory = Memory(location, user_id=str, windows="shared", window_ttl_seconds=60)
    assert sorted(str(w.message) for w in said) == [
        deprecation_note("window_ttl_seconds=", "window_ttl="),
        deprecation_note("windows=", "window_store="),
    ]
    assert said[0].filename == __file__  # the warning points at the caller's line
    assert (memory.config.window_store, memory.config.window_ttl) == ("shared", 60.0)
    assert memory._windows is not None
    with pytest.raises(ValueError, match="window_ttl must be > 0"), pytest.warns(DeprecationWarning):
        Memory(location, windows="shared", window_ttl_seconds=0)
    with pytest.raises(ValueError, match="pass window_store= only"):
        Memory(location, windows="shared", window_store="shared")


class _WrappedFactStore:
    """A user's own FactStore (here wrapping SQLite) that offers no window capability."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "window_store":
            raise AttributeError(name)
        return getattr(self.inner, name)


def test_shared_windows_need_a_store_that_can_hold_them(tmp_path) -> None:
    wrapped = _WrappedFactStore(MemoryStore(tmp_path / "x.db"))
    with pytest.raises(ValueError, match="cannot hold them: give it a window_store"):
        Memory(wrapped, window_store="shared")  # type: ignore[arg-type]
    # ...but a URL or a WindowStore puts the windows elsewhere.
    assert Memory(wrapped, window_store=f"sqlite:///{tmp_path / 'w.db'}")._windows is not None  # type: ignore[arg-type]


def test_a_users_own_store_offers_shared_windows_through_the_capability(tmp_path) -> None:
    class OwnStore(_WrappedFactStore):
        def window_store(self) -> Any:  # the HoldsWindows capability
            return SQLiteWindowStore(self.inner)

    location = OwnStore(MemoryStore(tmp_path / "own.db"))
    a = _agent(Memory(location, user_id=str, window_store="shared"))  # type: ignore[arg-type]
    b = _agent(Memory(location, user_id=str, window_store="shared"))  # type: ignore[arg-type]
    a.run("hi", context="alice")
    assert _window(b.memory, "alice") == ["hi", "ack hi"]  # type: ignore[arg-type]


def test_a_window_url_elsewhere_than_the_facts(tmp_path) -> None:
    windows_db = tmp_path / "windows.db"
    a = _agent(Memory(f"sqlite:///{tmp_path / 'a.db'}", user_id=str, window_store=f"sqlite:///{windows_db}"))
    b = _agent(Memory(f"sqlite:///{tmp_path / 'b.db'}", user_id=str, window_store=f"sqlite:///{windows_db}"))
    a.run("hi", context="alice")
    assert _window(b.memory, "alice") == ["hi", "ack hi"]  # type: ignore[arg-type]


def test_a_memory_with_one_window_shares_it_too(tmp_path) -> None:
    location = f"sqlite:///{tmp_path / 'db.sqlite'}"
    a = _agent(Memory(location, user_id="alice", window_store="shared"))
    b = _agent(Memory(location, user_id="alice", window_store="shared"))
    a.run("one")
    b.run("two")
    turn = a.memory.start_turn()  # type: ignore[union-attr]
    try:
        assert [m.content for m in turn.context_messages("")] == ["one", "ack one", "two", "ack two"]
    finally:
        turn.close()  # type: ignore[attr-defined]


def test_unresolved_callers_store_nothing(tmp_path) -> None:
    memory = Memory(f"sqlite:///{tmp_path / 'db.sqlite'}", user_id=lambda c: None, window_store="shared")
    _agent(memory).run("who am I?")
    row = memory._windows.store._conn().execute(  # type: ignore[union-attr]
        "SELECT count(*) FROM conversation_windows"
    ).fetchone()
    assert row[0] == 0


def test_async_runs_share_windows(tmp_path) -> None:
    location = f"sqlite:///{tmp_path / 'db.sqlite'}"
    a = _agent(Memory(location, user_id=str, window_store="shared"))
    b = _agent(Memory(location, user_id=str, window_store="shared"))

    async def main() -> None:
        await a.arun("one", context="alice")
        await b.arun("two", context="alice")
        await asyncio.gather(*(a.arun(f"bob {i}", context="bob") for i in range(5)))

    asyncio.run(main())
    assert _window(b.memory, "alice") == ["one", "ack one", "two", "ack two"]  # type: ignore[arg-type]
    assert len(_window(b.memory, "bob")) == 10  # type: ignore[arg-type]


def test_load_from_a_file_is_pushed_to_every_worker(tmp_path) -> None:
    location = f"sqlite:///{tmp_path / 'db.sqlite'}"
    a, b = Memory(location, user_id=str, window_store="shared"), Memory(location, user_id=str, window_store="shared")
    _agent(a).run("saved turn", context="alice")
    a.for_user("alice").save(tmp_path / "snap")
    a.forget(tier="user", id="alice")
    b.for_user("alice").load(tmp_path / "snap")
    assert _window(a, "alice") == ["saved turn", "ack saved turn"]


def test_a_store_outage_degrades_to_in_process_windows(tmp_path, caplog) -> None:
    memory = Memory(
        f"sqlite:///{tmp_path / 'db.sqlite'}", user_id=str, window_store="redis://127.0.0.1:1/0"
    )
    agent = _agent(memory)
    with caplog.at_level(logging.WARNING, logger="fastaiagent.memory"):
        agent.run("one", context="alice")
        agent.run("two", context="alice")
    assert [m.content for m in memory._users.get("alice").memory.primary.get_messages()] == [
        "one", "ack one", "two", "ack two"
    ]
    assert any("shared window store" in r.getMessage() for r in caplog.records)


def test_an_unreadable_stored_window_starts_over_instead_of_failing(tmp_path, caplog) -> None:
    location = f"sqlite:///{tmp_path / 'db.sqlite'}"
    memory = Memory(location, user_id=str, window_store="shared")
    agent = _agent(memory)
    for user in ("alice", "bob", "carol"):
        agent.run("before", context=user)
    store = memory._windows.store  # type: ignore[union-attr]
    corrupt = {"alice": "{not json", "bob": '{"format": 99, "blocks": {}}', "carol": "[" * 100_000}
    for user, text in corrupt.items():
        key = memory._windows.key(user)  # type: ignore[union-attr]
        store.save(key, text, store.load(key).version, None)
    with caplog.at_level(logging.ERROR, logger="fastaiagent.memory"):
        for user in corrupt:  # carol's is nested deeper than json decodes
            agent.run("after", context=user)
    for user in corrupt:
        assert _window(Memory(location, user_id=str, window_store="shared"), user) == ["after", "ack after"]
    assert sum("unreadable" in r.getMessage() for r in caplog.records) == 3


def test_save_writes_the_latest_stored_window(tmp_path) -> None:
    location = f"sqlite:///{tmp_path / 'db.sqlite'}"
    a, b = Memory(location, user_id=str, window_store="shared"), Memory(location, user_id=str, window_store="shared")
    _agent(a).run("one", context="alice")
    _agent(b).run("two", context="alice")  # a's cached copy is now behind
    a.for_user("alice").save(tmp_path / "snap")
    restored = Memory(f"sqlite:///{tmp_path / 'other.db'}", user_id=str)
    restored.for_user("alice").load(tmp_path / "snap")
    assert _window(restored, "alice") == ["one", "ack one", "two", "ack two"]
