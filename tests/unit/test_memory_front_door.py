"""Memory construction, tiers and direct verbs on the SQLite default (acceptance items 1-37, H1-H6)."""

from __future__ import annotations

import os
import re
import threading
import warnings

import pytest
from _vector_fakes import WordHashEmbedder

from fastaiagent import Agent, Memory
from fastaiagent.learn import Fact, MemoryStore
from fastaiagent.testing import FunctionLLM


def prompt_llm() -> FunctionLLM:
    return FunctionLLM(lambda ms: "\n".join(f"{m.role}:{m.content}" for m in ms))


def test_memory_with_no_arguments_remembers_the_conversation(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    llm = prompt_llm()
    agent = Agent(name="assistant", llm=llm, memory=Memory())
    agent.run("My name is Alice.")
    result = agent.run("What's my name?")
    assert "user:My name is Alice." in result.output


def test_constructing_memory_creates_no_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FASTAIAGENT_LOCAL_DB")
    Memory()
    Memory(location="sqlite", agent_id="a", user_id=lambda ctx: "x")
    assert list(tmp_path.iterdir()) == []


def test_default_location_is_the_local_sqlite_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FASTAIAGENT_LOCAL_DB")
    mem = Memory(agent_id="support")
    assert isinstance(mem.location, MemoryStore)
    mem.persist("Return policy is 30 days", tier="global")
    assert (tmp_path / ".fastaiagent" / "local.db").is_file()


def test_default_path_is_resolved_once_and_survives_chdir(tmp_path, monkeypatch):
    monkeypatch.delenv("FASTAIAGENT_LOCAL_DB")
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    mem = Memory(agent_id="a")
    mem.persist("fact one", tier="global")
    monkeypatch.chdir(second)
    mem.persist("fact two", tier="global")
    assert not (second / ".fastaiagent").exists()
    assert [f.fact for f in mem.retrieve(tier="global")] == ["fact two", "fact one"]


def test_locations_select_backends_and_bad_ones_fail(tmp_path):
    store = MemoryStore(tmp_path / "mine.db")
    assert Memory(location=store).location is store
    with pytest.raises(ValueError, match="unsupported location"):
        Memory(location="mysql://x")
    with pytest.raises(TypeError, match="location must be a string or a FactStore instance, got int"):
        Memory(location=42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"agent_id": ""}, "agent_id cannot be empty; leave it out (None) instead"),
        ({"plane_agent_id": ""}, "plane_agent_id cannot be empty; leave it out (None) instead"),
        ({"max_users": 0}, "max_users must be >= 1, got 0"),
        ({"window": 0}, "window must be >= 1, got 0"),
        ({"window": -3}, "window must be >= 1, got -3"),
        ({"max_learned_facts": 0}, "max_learned_facts must be >= 1, got 0"),
        ({"max_facts": 0}, "max_facts must be >= 1, got 0"),
        ({"user_id": ""}, "user_id cannot be empty; leave it out (None) instead"),
        ({"agent_id": "*"}, 'agent_id cannot be "*" (the wildcard is for reads and deletes)'),
        ({"project_id": "*"}, 'project_id cannot be "*": a tenant is one exact id'),
        ({"embedder": "minilm"}, "unknown embedder 'minilm': use 'auto', 'local', 'openai'"),
    ],
)
def test_bad_keywords_raise_value_error_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Memory(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"learn": "gpt-4"}, "learn= needs an LLM (LLMClient or BaseLLM), got str"),
        ({"summarize": object()}, "summarize= needs an LLM (LLMClient or BaseLLM), got object"),
        ({"recall": "yes"}, 'recall= must be "auto", a VectorStore instance, a RecallOptions or None, got \'yes\''),
        ({"semantic": 3}, 'semantic= must be "auto", a VectorStore instance or None, got 3'),
        ({"embedder": 384}, "embedder= must be a name or an Embedder (embed + dimension), got 384"),
        ({"dedupe": "true"}, "dedupe must be True or False, got str 'true'"),
        ({"agent_id": 5}, "agent_id must be a str, got int 5"),
    ],
)
def test_wrong_keyword_types_raise_type_error(kwargs, message):
    with pytest.raises(TypeError, match=re.escape(message)):
        Memory(**kwargs)


def test_learn_without_a_user_is_refused():
    with pytest.raises(ValueError, match="user_id"):
        Memory(learn=prompt_llm())


def test_defaults():
    mem = Memory()
    assert mem.config.window == 20
    assert mem.config.max_learned_facts == 200
    assert mem.config.max_users == 10_000
    assert Memory(max_users=None).config.max_users is None
    assert Memory(max_learned_facts=None, user_id="u").config.max_learned_facts is None
    assert bool(Memory()) is True


def test_global_and_user_tiers_map_to_store_scopes():
    mem = Memory(agent_id="support")
    gid = mem.persist("Return policy is 30 days", tier="global")
    uid = mem.persist("Prefers email", tier="user", id="alice")
    assert isinstance(gid, int) and isinstance(uid, int)
    g = mem.location.get(gid)
    u = mem.location.get(uid)
    assert (g.scope, g.scope_id) == ("agent", "support")
    assert (u.scope, u.scope_id) == ("user", "alice")
    assert u.confidence == 1.0 and u.source_trace_id is None and u.source_label == "manual"


def test_spec_direct_store_use_snippet():
    mem = Memory(location="sqlite", agent_id="support")
    mem.persist("Return policy is 30 days", tier="global")
    mem.persist("Prefers email", tier="user", id="alice")
    assert [f.fact for f in mem.retrieve(tier="user", id="alice")] == ["Prefers email"]
    new_id = mem.update("Prefers Slack", old="Prefers email", tier="user", id="alice")
    assert [f.id for f in mem.retrieve(tier="user", id="alice")] == [new_id]
    assert mem.forget(tier="user", id="alice") == 2  # the fact and its history
    assert mem.retrieve(tier="user", id="alice") == []
    assert [f.fact for f in mem.retrieve(tier="global")] == ["Return policy is 30 days"]


def test_user_writes_need_an_id_and_reads_without_one_are_empty():
    mem = Memory(agent_id="a")
    mem.persist("x", tier="user", id="alice")
    with pytest.raises(ValueError, match=re.escape('persist(tier="user") needs id=')):
        mem.persist("x", tier="user")
    with pytest.raises(ValueError, match=re.escape('forget(tier="user") needs id= (or id="*"')):
        mem.forget(tier="user")
    assert mem.retrieve(tier="user") == []


def test_global_writes_without_agent_id_warn():
    mem = Memory()
    with pytest.warns(UserWarning, match="agent_id"):
        fid = mem.persist("shared", tier="global")
    with pytest.warns(UserWarning, match="agent_id"):
        mem.update("shared v2", old=fid, tier="global")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Memory(agent_id="a").persist("fine", tier="global")
        Memory().persist("fine too", tier="global", id="other-agent")


def test_persist_is_idempotent_and_normalised():
    mem = Memory(agent_id="a")
    first = mem.persist("Prefers  EMAIL", tier="user", id="alice")
    assert mem.persist("prefers email", tier="user", id="alice") == first
    assert mem.persist("prefers email", tier="user", id="bob") != first


def test_concurrent_persists_of_one_fact_get_one_id():
    mem = Memory(agent_id="a")
    ids: list[int] = []
    barrier = threading.Barrier(16)

    def write():
        barrier.wait()
        ids.append(mem.persist("Allergic to peanuts", tier="user", id="alice"))

    threads = [threading.Thread(target=write) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 1
    assert len(mem.retrieve(tier="user", id="alice")) == 1


def test_retrieve_is_newest_first_and_limited():
    mem = Memory()
    for i in range(5):
        mem.persist(f"fact {i}", tier="user", id="u")
    facts = mem.retrieve(tier="user", id="u")
    assert all(isinstance(f, Fact) for f in facts)
    assert [f.fact for f in facts] == [f"fact {i}" for i in reversed(range(5))]
    assert [f.fact for f in mem.retrieve(tier="user", id="u", limit=2)] == ["fact 4", "fact 3"]


def test_update_by_text_and_by_id_keeps_history():
    mem = Memory()
    old = mem.persist("Prefers email", tier="user", id="alice")
    new = mem.update("Prefers Slack", old="prefers EMAIL", tier="user", id="alice")
    assert mem.location.get(old).superseded_by == new
    newer = mem.update("Prefers phone", old=new, tier="user", id="alice")
    assert [f.fact for f in mem.retrieve(tier="user", id="alice")] == ["Prefers phone"]
    assert mem.location.get(new).superseded_by == newer
    with pytest.raises(ValueError, match="no active"):
        mem.update("x", old="never said", tier="user", id="alice")


def test_update_names_the_fact_it_replaces_and_old_by_position_is_deprecated():
    mem = Memory()
    mem.persist("Prefers email", tier="user", id="alice")
    with pytest.warns(DeprecationWarning, match=re.escape("use update(new, old=...)")) as said:
        by_position = mem.update("Prefers Slack", "Prefers email", "user", "alice")
    assert said[0].filename == __file__  # points at the caller
    assert [f.fact for f in mem.retrieve(tier="user", id="alice")] == ["Prefers Slack"]
    with pytest.warns(DeprecationWarning):  # old alone by position, the rest named
        newer = mem.update("Prefers phone", by_position, tier="user", id="alice")
    assert mem.location.get(by_position).superseded_by == newer
    with pytest.raises(ValueError, match=re.escape("update() needs old=")):
        mem.update("Prefers mail", tier="user", id="alice")
    with pytest.raises(TypeError, match="old both by position and as old="):
        mem.update("Prefers mail", "Prefers phone", old="Prefers phone", id="alice")
    with pytest.raises(TypeError, match="at most old, tier, id"):
        mem.update("a", "b", "user", "alice", "extra")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the spec's form warns about nothing
        mem.update("Prefers mail", old="Prefers phone", tier="user", id="alice")


def test_supersede_cycles_keep_exactly_one_active_fact():  # acceptance H1, H3
    mem = Memory()
    a = mem.persist("A", tier="user", id="u")
    b = mem.update("B", old=a, tier="user", id="u")
    a2 = mem.update("A", old=b, tier="user", id="u")
    assert [f.fact for f in mem.retrieve(tier="user", id="u")] == ["A"]
    assert a2 != a  # a new active row; the old one stays history
    again = mem.persist("B", tier="user", id="u")
    active = mem.retrieve(tier="user", id="u")
    assert {f.fact for f in active} == {"A", "B"} and again in {f.id for f in active}


def test_update_to_the_same_text_does_not_hide_the_fact():  # acceptance H2
    mem = Memory()
    fid = mem.persist("Likes tea", tier="user", id="u")
    assert mem.update("likes TEA", old=fid, tier="user", id="u") == fid
    assert [f.id for f in mem.retrieve(tier="user", id="u")] == [fid]


def test_update_cannot_cross_users_or_tiers():  # acceptance H4
    mem = Memory(agent_id="a")
    alice = mem.persist("Alice fact", tier="user", id="alice")
    glob = mem.persist("Global fact", tier="global")
    with pytest.raises(ValueError, match=rf"no fact #{alice} in user:bob: a fact can only replace") as crossed:
        mem.update("Bob takes over", old=alice, tier="user", id="bob")
    assert "alice" not in str(crossed.value)
    with pytest.raises(ValueError, match=rf"no fact #{glob} in user:bob:") as crossed:
        mem.update("User takes over", old=glob, tier="user", id="bob")
    assert "agent" not in str(crossed.value) and "Global" not in str(crossed.value)
    assert mem.location.get(alice).superseded_by is None
    assert mem.location.get(glob).superseded_by is None
    assert mem.retrieve(tier="user", id="bob") == []


def test_wildcard_is_refused_on_write():  # acceptance H5
    mem = Memory(agent_id="a")
    with pytest.raises(ValueError, match=r"\*"):
        mem.persist("x", tier="user", id="*")
    fid = mem.persist("x", tier="user", id="u")
    with pytest.raises(ValueError, match=r"\*"):
        mem.update("y", old=fid, tier="global", id="*")


def test_forget_guard_rails():
    mem = Memory(agent_id="a")
    other = Memory(agent_id="b", location=mem.location)
    mem.persist("a global", tier="global")
    other.persist("b global", tier="global")
    with pytest.raises(ValueError, match="agent_id"):
        Memory(location=mem.location).forget(tier="global")
    assert mem.forget(tier="global") == 1
    assert [f.fact for f in other.retrieve(tier="global")] == ["b global"]
    for user in ("u1", "u2", "u3"):
        mem.persist(f"{user} fact", tier="user", id=user)
    assert mem.forget(tier="user", id="*") == 3
    assert Memory(location=mem.location).forget(tier="global", id="*") == 1


def test_forget_one_fact_only():
    mem = Memory()
    mem.persist("keep me", tier="user", id="u")
    mem.persist("drop me", tier="user", id="u")
    assert mem.forget(tier="user", id="u", fact="DROP  me") == 1
    assert [f.fact for f in mem.retrieve(tier="user", id="u")] == ["keep me"]


def test_forget_of_a_text_removes_its_superseded_versions_too():
    mem = Memory()
    first = mem.persist("my card is 4111", tier="user", id="u")
    mem.update("card ends 5555", old=first, id="u")  # the text is now history only
    assert mem.forget(tier="user", id="u", fact="My card is 4111") == 1
    assert mem.location.get(first) is None
    history = mem.location.browse(scope_id="u", include_superseded=True)
    assert [f.fact for f in history] == ["card ends 5555"]


@pytest.mark.parametrize("verb", ["persist", "retrieve", "forget"])
def test_session_tier_is_not_a_store_and_unknown_tiers_fail(verb):
    mem = Memory()
    call = {
        "persist": lambda tier: mem.persist("x", tier=tier, id="u"),
        "retrieve": lambda tier: mem.retrieve(tier=tier, id="u"),
        "forget": lambda tier: mem.forget(tier=tier, id="u"),
    }[verb]
    expected = rf"{verb}\(tier='session'\): the session tier is the conversation window"
    with pytest.raises(NotImplementedError, match=expected):
        call("session")
    with pytest.raises(ValueError, match="unknown tier 'team'; expected one of"):
        call("team")


def test_retrieve_by_query_needs_semantic():
    with pytest.raises(ValueError, match="semantic"):
        Memory().retrieve("what foods?", tier="user", id="alice")


def test_global_fact_reaches_only_agents_with_the_same_agent_id():
    store = MemoryStore(os.environ["FASTAIAGENT_LOCAL_DB"])
    Memory(location=store, agent_id="support").persist("Return policy is 30 days", tier="global")
    same = prompt_llm()
    Agent(name="s", llm=same, memory=Memory(location=store, agent_id="support")).run("hi")
    other = prompt_llm()
    Agent(name="o", llm=other, memory=Memory(location=store, agent_id="sales")).run("hi")
    none = prompt_llm()
    Agent(name="n", llm=none, memory=Memory(location=store)).run("hi")
    assert "Return policy is 30 days" in str([m.content for m in same.calls[0]])
    assert "Return policy" not in str([m.content for m in other.calls[0]])
    assert "Return policy" not in str([m.content for m in none.calls[0]])


def test_project_id_partitions_every_tier():
    store = MemoryStore(os.environ["FASTAIAGENT_LOCAL_DB"])
    acme = Memory(location=store, agent_id="a", project_id="acme")
    globex = Memory(location=store, agent_id="a", project_id="globex")
    acme.persist("acme global", tier="global")
    acme.persist("acme alice", tier="user", id="alice")
    assert globex.retrieve(tier="global") == []
    assert globex.retrieve(tier="user", id="alice") == []
    assert globex.forget(tier="user", id="alice") == 0
    assert [f.fact for f in acme.retrieve(tier="user", id="alice")] == ["acme alice"]
    llm = prompt_llm()
    Agent(name="g", llm=llm, memory=Memory(location=store, agent_id="a", project_id="globex", user_id="alice")).run("hi")
    assert "acme" not in str([m.content for m in llm.calls[0]])


def test_injection_order_global_then_user_then_window():
    mem = Memory(agent_id="support", user_id="alice")
    mem.persist("Return policy is 30 days", tier="global")
    mem.persist("Prefers email", tier="user", id="alice")
    llm = prompt_llm()
    agent = Agent(name="s", llm=llm, system_prompt="You help.", memory=mem)
    agent.run("first")
    agent.run("second")
    roles_contents = [(m.role, m.content) for m in llm.calls[-1]]
    assert roles_contents[0] == ("system", "You help.")
    assert "Return policy is 30 days" in roles_contents[1][1]
    assert "Prefers email" in roles_contents[2][1]
    assert [r for r, _ in roles_contents[3:]] == ["user", "assistant", "user"]


def test_confidence_must_be_a_number_in_range_on_every_write():
    mem = Memory(agent_id="a")
    with pytest.raises(TypeError, match="confidence must be a number, got bool True"):
        mem.persist("likes tea", tier="user", id="alice", confidence=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"confidence must be <= 1.0, got 1.5"):
        mem.persist("likes tea", tier="user", id="alice", confidence=1.5)
    assert mem.retrieve(tier="user", id="alice") == []  # nothing half-written


def test_retrieve_limit_zero_returns_nothing_and_bad_limits_fail():
    mem = Memory(agent_id="a")
    for text in ("one", "two", "three"):
        mem.persist(text, tier="user", id="alice")
    assert mem.retrieve(tier="user", id="alice", limit=0) == []
    assert [f.fact for f in mem.retrieve(tier="user", id="alice", limit=2)] == ["three", "two"]
    with pytest.raises(ValueError, match="limit must be >= 0, got -1"):
        mem.retrieve(tier="user", id="alice", limit=-1)
    with pytest.raises(TypeError, match="limit must be an int, got str '2'"):
        mem.retrieve(tier="user", id="alice", limit="2")  # type: ignore[arg-type]


def test_the_checked_keywords_are_on_config_and_location_is_the_store(tmp_path):
    mem = Memory(f"sqlite:///{tmp_path / 'facts.db'}", agent_id="bot", window=7)
    assert (mem.config.agent_id, mem.config.window, mem.config.per_user) == ("bot", 7, False)
    assert repr(mem).startswith("Memory(location=SQLiteFactStore(")
    with pytest.raises(AttributeError, match="cannot assign"):
        mem.config.window = 3  # type: ignore[misc]


def test_retrieve_is_bounded_by_default_and_pages_with_offset(tmp_path):
    store = MemoryStore(tmp_path / "facts.db")
    mem = Memory(location=store)
    for i in range(120):
        store.add(Fact(f"fact {i}", scope="user", scope_id="alice", created_at=1000.0 + i))
    first = mem.retrieve(tier="user", id="alice")
    assert [f.fact for f in first] == [f"fact {i}" for i in range(119, 69, -1)]  # 50, newest first
    second = mem.retrieve(tier="user", id="alice", offset=50)
    last = mem.retrieve(tier="user", id="alice", offset=100)
    assert [f.fact for f in second] == [f"fact {i}" for i in range(69, 19, -1)]
    assert [f.fact for f in last] == [f"fact {i}" for i in range(19, -1, -1)]
    assert mem.retrieve(tier="user", id="alice", offset=120) == []
    assert [f.fact for f in mem.retrieve(tier="user", id="alice", limit=2, offset=1)] == [
        "fact 118",
        "fact 117",
    ]
    with pytest.raises(ValueError, match="offset must be >= 0, got -1"):
        mem.retrieve(tier="user", id="alice", offset=-1)
    with pytest.raises(TypeError, match="offset must be an int"):
        mem.retrieve(tier="user", id="alice", offset="50")  # type: ignore[arg-type]


def test_retrieve_limit_none_returns_every_fact_as_the_store_does(tmp_path):
    store = MemoryStore(tmp_path / "facts.db")
    mem = Memory(location=store, semantic="auto", embedder=WordHashEmbedder())
    for i in range(120):
        store.add(Fact(f"fact {i}", scope="user", scope_id="alice", created_at=1000.0 + i))
    every = mem.retrieve(tier="user", id="alice", limit=None)
    assert [f.id for f in every] == [f.id for f in store.list_active("user", "alice", limit=None)]
    assert len(every) == 120 and len(mem.retrieve(tier="user", id="alice")) == 50
    assert len(mem.retrieve(tier="user", id="alice", limit=None, offset=100)) == 20
    assert len(mem.retrieve("fact", tier="user", id="alice")) == 10  # by meaning: 10 by default
    with pytest.raises(ValueError, match=r"a search by meaning returns its closest facts.*pass limit=N"):
        mem.retrieve("fact", tier="user", id="alice", limit=None)


def test_update_by_text_finds_the_old_fact_by_index(tmp_path):
    store = MemoryStore(tmp_path / "facts.db")
    mem = Memory(location=store)
    old = mem.persist("Prefers email", tier="user", id="alice")
    mem.persist("Prefers email", tier="user", id="bob")
    new = mem.update("Prefers Slack", old="  prefers EMAIL ", tier="user", id="alice")
    assert store.get(old).superseded_by == new  # type: ignore[union-attr]
    assert [f.fact for f in mem.retrieve(tier="user", id="bob")] == ["Prefers email"]
    with pytest.raises(LookupError, match="no active user:alice fact matches old='Prefers email'"):
        mem.update("Prefers phone", old="Prefers email", tier="user", id="alice")
