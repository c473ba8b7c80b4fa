"""One id rule at every door of a Memory, on SQLite, Postgres and Redis (issue #46).

A NUL, a lone surrogate, an id over 512 characters or one of whitespace only is
refused by every verb, ``add_history``, ``export_user``, ``for_user`` and
``drop_user`` with the library's InvalidValueError naming the fix, before any
store sees it (never a raw UnicodeEncodeError from a driver), and nothing is
written. A resolver that returns such an id gets the run no user memory.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))
from _vector_fakes import WordHashEmbedder

from fastaiagent import Agent, Memory, RunContext
from fastaiagent.errors import InvalidValueError
from fastaiagent.llm.message import UserMessage
from fastaiagent.testing import CannedLLM

# (a bad id, words of the fix its message names)
BAD_IDS = [
    pytest.param("a\x00b", "remove them", id="nul"),
    pytest.param("al\ud800ice", "decoded from its bytes", id="lone-surrogate"),
    pytest.param("x" * 10_000, "use a shorter id", id="10000-chars"),
    pytest.param(" \t ", "give a real id", id="whitespace-only"),
]


@dataclass
class Session:
    user_id: str


def _doors(memory: Memory, bad: str, tmp_path: Path) -> dict[str, object]:
    return {
        "persist": lambda: memory.persist("Likes tea", id=bad),
        "retrieve": lambda: memory.retrieve(id=bad),
        "update": lambda: memory.update("Likes coffee", old="Likes tea", id=bad),
        "forget": lambda: memory.forget(id=bad),
        "history": lambda: memory.history("Likes tea", id=bad),
        "expire": lambda: memory.expire("Likes tea", id=bad),
        "global persist": lambda: memory.persist("Ships on Monday", tier="global", id=bad),
        "add_history": lambda: memory.add_history([UserMessage("I live in Porto")], user_id=bad),
        "export_user": lambda: memory.export_user(bad, tmp_path / "out.jsonl"),
        "for_user": lambda: memory.for_user(bad),
        "drop_user": lambda: memory.drop_user(bad),
    }


@pytest.mark.parametrize(("bad", "fix"), BAD_IDS)
def test_every_door_of_a_memory_refuses_a_bad_id_naming_the_fix(any_location, tmp_path, bad, fix):
    memory = Memory(
        any_location, user_id=lambda ctx: ctx.state.user_id, agent_id="support",
        recall="auto", embedder=WordHashEmbedder(),
    )  # fmt: skip
    memory.persist("Likes tea", id="alice")
    for door, call in _doors(memory, bad, tmp_path).items():
        with pytest.raises(InvalidValueError) as info:
            call()  # type: ignore[operator]
        assert fix in str(info.value), (door, str(info.value)[:200])
        assert not isinstance(info.value.__context__, UnicodeError), door
    assert [f.fact for f in memory.retrieve(id="alice")] == ["Likes tea"]
    assert not (tmp_path / "out.jsonl").exists()
    assert [(s.scope, s.scope_id) for s in memory.location.subjects()] == [("user", "alice")]


@pytest.mark.parametrize(("bad", "fix"), BAD_IDS)
def test_a_resolver_returning_a_bad_id_gets_no_user_memory_and_a_warning(any_location, bad, fix, caplog):
    memory = Memory(any_location, user_id=lambda ctx: ctx.state.user_id, learn=CannedLLM(["[]"]))
    agent = Agent(name="a", llm=CannedLLM(["Hello!"]), memory=memory)
    with caplog.at_level(logging.WARNING, logger="fastaiagent.memory"):
        assert agent.run("I live in Porto", context=RunContext(state=Session(bad))).output == "Hello!"
    assert memory.cached_users == []
    assert memory.location.subjects() == []
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "user_id" in warned and (fix in warned or "not a user id" in warned), warned


@pytest.mark.parametrize(("bad", "fix"), BAD_IDS[:3])
def test_the_stores_own_reads_and_deletes_apply_the_rule_too(any_location, bad, fix):
    # A driver never sees the id: no UnicodeEncodeError, no Postgres "outage" for a NUL.
    from fastaiagent.facts.factory import make_fact_store

    store = make_fact_store(any_location)
    calls = {
        "list_active": lambda: store.list_active("user", bad),
        "list_as_of": lambda: store.list_as_of("user", bad, "", 1.0),
        "delete": lambda: store.delete("user", bad),
        "expire": lambda: store.expire("user", bad, "", 1, 1.0),
        "find_active": lambda: store.find_active("user", bad, "", "Likes tea"),
        "browse": lambda: store.browse(scope="user", scope_id=bad),
        "project": lambda: store.list_active("user", "alice", bad),
    }
    for call_name, call in calls.items():
        with pytest.raises(InvalidValueError) as info:
            call()
        assert fix in str(info.value), (call_name, str(info.value)[:200])
    text_fix = "remove them" if "\x00" in bad else "decoded from its bytes"
    if len(bad) < 100:
        for call in (lambda: store.find_active("user", "alice", "", bad), lambda: store.delete("user", "alice", fact=bad)):
            with pytest.raises(InvalidValueError, match=text_fix):
                call()
    store.close()
