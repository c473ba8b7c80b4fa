"""Per-user routing, unresolved callers, max_users, for_user, complete forget (acceptance 38-59, H13, H18, H20)."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass

import pytest

from fastaiagent import Agent, Memory, RunContext
from fastaiagent.agent import StreamDelta
from fastaiagent.llm.message import Message
from fastaiagent.testing import FunctionLLM


@dataclass
class Session:
    user_id: str


def ctx(user: str) -> RunContext:
    return RunContext(state=Session(user_id=user))


def prompt_text(messages: list[Message]) -> str:
    return "\n".join(f"{m.role}:{m.content}" for m in messages)


def echo_prompt() -> FunctionLLM:
    return FunctionLLM(prompt_text)


def resolver(context):
    return context.state.user_id


def test_resolver_is_called_with_the_run_context_once_per_run():  # acceptance 38, H13
    seen: list[object] = []

    def tracking(context):
        seen.append(context)
        return context.state.user_id

    agent = Agent(name="a", llm=echo_prompt(), memory=Memory(user_id=tracking))
    context = ctx("alice")
    agent.run("hi", context=context)
    assert seen == [context]


def test_a_flipping_resolver_cannot_split_a_run_between_users():  # acceptance H13
    answers = iter(["alice", "bob", "alice", "bob"])
    mem = Memory(user_id=lambda c: next(answers))
    agent = Agent(name="a", llm=echo_prompt(), memory=mem)
    agent.run("from first run", context=ctx("?"))
    assert mem.cached_users == ["alice"]
    assert mem.for_user("alice").messages[0].content == "from first run"


def test_users_get_separate_windows_and_facts():  # acceptance 39, 40
    mem = Memory(agent_id="support", user_id=resolver)
    mem.persist("Alice is allergic to cats", tier="user", id="alice")
    mem.persist("Bob plays chess", tier="user", id="bob")
    llm = echo_prompt()
    agent = Agent(name="s", llm=llm, memory=mem)
    agent.run("alice secret: 4242", context=ctx("alice"))
    bob_reply = agent.run("hello", context=ctx("bob")).output
    assert "4242" not in bob_reply and "cats" not in bob_reply and "Bob plays chess" in bob_reply
    alice_reply = agent.run("again", context=ctx("alice")).output
    assert "4242" in alice_reply and "chess" not in alice_reply


def test_isolation_with_arun_astream_and_interleaving():  # acceptance 41
    mem = Memory(user_id=resolver, window=50)
    llm = FunctionLLM(prompt_text)
    agent = Agent(name="s", llm=llm, memory=mem)

    async def user_session(user: str, turns: int):
        for i in range(turns):
            if i % 2:
                await agent.arun(f"{user}-turn-{i}", context=ctx(user))
            else:
                async for event in agent.astream(f"{user}-turn-{i}", context=ctx(user)):
                    assert not isinstance(event, StreamDelta) or f"{user}-turn-{i}" in event.text
            await asyncio.sleep(0)

    async def main():
        await asyncio.gather(*(user_session(f"u{n}", 6) for n in range(20)))

    asyncio.run(main())
    for n in range(20):
        window = [m.content or "" for m in mem.for_user(f"u{n}").messages]
        assert [t for t in window[::2]] == [f"u{n}-turn-{i}" for i in range(6)]
        assert all(f"u{m}-turn" not in " ".join(window) for m in range(20) if m != n)


@pytest.mark.slow
def test_isolation_under_load_1000_users_10_turns():
    mem = Memory(agent_id="support", user_id=resolver, window=20)
    for n in range(0, 1000, 50):
        mem.persist(f"secret fact of u{n}", tier="user", id=f"u{n}")
    leaks: list[str] = []

    def check(messages: list[Message]) -> str:
        text = prompt_text(messages)
        me = messages[-1].content.split("|")[0]
        for token in text.replace("\n", " ").replace(":", " ").split():
            if token.startswith("u") and token[1:].isdigit() and token != me:
                leaks.append(f"{me} saw {token}")
        return f"ok {me}"

    agent = Agent(name="s", llm=FunctionLLM(check), memory=mem)

    async def one_user(n: int):
        for turn in range(10):
            await agent.arun(f"u{n}|turn {turn} u{n}", context=ctx(f"u{n}"))

    async def main():
        await asyncio.gather(*(one_user(n) for n in range(1000)))

    asyncio.run(main())
    assert leaks == []
    assert len(mem.cached_users) == 1000
    assert len(mem.for_user("u999").messages) == 20


def test_no_context_gives_no_window_and_stores_nothing():  # acceptance 42
    mem = Memory(user_id=resolver)
    llm = echo_prompt()
    agent = Agent(name="s", llm=llm, memory=mem)
    agent.run("secret one")
    reply = agent.run("what did I say?").output
    assert "secret one" not in reply
    assert mem.cached_users == []


@pytest.mark.parametrize("value", [None, ""])
def test_resolver_returning_nothing_is_unresolved(value):  # acceptance 43, 46
    mem = Memory(user_id=lambda c: value)
    agent = Agent(name="s", llm=echo_prompt(), memory=mem)
    agent.run("first unresolved secret", context=ctx("x"))
    assert "first unresolved secret" not in agent.run("second", context=ctx("x")).output
    assert mem.cached_users == []


def test_raising_resolver_logs_one_warning_with_the_dict_hint(caplog):  # acceptance 44
    mem = Memory(user_id=lambda c: c.state.user_id)
    agent = Agent(name="s", llm=echo_prompt(), memory=mem)
    with caplog.at_level(logging.WARNING, logger="fastaiagent.memory"):
        for _ in range(3):
            agent.run("hi", context=RunContext(state={"user_id": "alice"}))
    warnings_logged = [r for r in caplog.records if "resolver" in r.getMessage()]
    assert len(warnings_logged) == 1
    assert 'ctx.state["user_id"]' in warnings_logged[0].getMessage()
    assert mem.cached_users == []


def test_dict_state_resolver_works_when_read_as_a_dict():
    mem = Memory(user_id=lambda c: c.state["user_id"])
    agent = Agent(name="s", llm=echo_prompt(), memory=mem)
    agent.run("hello", context=RunContext(state={"user_id": "alice"}))
    assert mem.cached_users == ["alice"]


def test_unresolved_callers_still_get_global_facts():  # acceptance 45
    mem = Memory(agent_id="support", user_id=resolver)
    mem.persist("Return policy is 30 days", tier="global")
    mem.persist("Alice fact", tier="user", id="alice")
    reply = Agent(name="s", llm=echo_prompt(), memory=mem).run("policy?").output
    assert "Return policy is 30 days" in reply and "Alice fact" not in reply


def test_save_load_outside_a_run_raise_and_for_user_round_trips(tmp_path):  # acceptance 48, 49
    mem = Memory(user_id=resolver)
    agent = Agent(name="s", llm=echo_prompt(), memory=mem)
    agent.run("I live in Lisbon", context=ctx("alice"))
    with pytest.raises(RuntimeError, match="for_user"):
        mem.save(tmp_path / "x")
    with pytest.raises(RuntimeError, match="for_user"):
        mem.load(tmp_path / "x")
    mem.for_user("alice").save(tmp_path / "alice")

    restarted = Memory(user_id=resolver)
    restarted.for_user("alice").load(tmp_path / "alice")
    reply = Agent(name="s", llm=echo_prompt(), memory=restarted).run("where?", context=ctx("alice")).output
    assert "I live in Lisbon" in reply


def test_save_inside_a_run_uses_the_runs_user(tmp_path):
    mem = Memory(user_id=resolver)

    def save_me() -> str:
        mem.save(tmp_path / "inside")
        return "saved"

    from fastaiagent.testing import CannedLLM, tool_call

    agent = Agent(name="s", llm=CannedLLM([tool_call("save_me"), "done"]), memory=mem, tools=[save_me])
    agent.run("hello", context=ctx("carol"))
    assert (tmp_path / "inside" / "primary.json").is_file()
    with pytest.raises(RuntimeError, match=r'outside a run: use mem.for_user\("alice"\).save'):
        mem.save(tmp_path / "after")


def test_for_user_needs_a_resolver():  # acceptance 50
    with pytest.raises(RuntimeError, match="save"):
        Memory().for_user("alice")
    with pytest.raises(RuntimeError, match=r"for_user\(\) is for a Memory with a user_id resolver"):
        Memory(user_id="alice").for_user("alice")


def test_lru_drops_least_recently_used_and_refreshes_on_use(caplog):  # acceptance 54, 55, 58
    mem = Memory(user_id=resolver, max_users=2)
    agent = Agent(name="s", llm=echo_prompt(), memory=mem)
    with caplog.at_level(logging.WARNING, logger="fastaiagent.memory"):
        agent.run("a1", context=ctx("a"))
        agent.run("b1", context=ctx("b"))
        agent.run("a2", context=ctx("a"))  # a is now the most recent
        agent.run("c1", context=ctx("c"))  # drops b
        assert mem.cached_users == ["a", "c"]
        agent.run("d1", context=ctx("d"))  # drops a
        assert mem.cached_users == ["c", "d"]
    drops = [r for r in caplog.records if "max_users" in r.getMessage()]
    assert len(drops) == 1


def test_evicted_user_returns_with_facts_but_a_fresh_window(tmp_path):  # acceptance 56, 57, 59
    mem = Memory(user_id=resolver, max_users=1)
    mem.persist("Alice likes jazz", tier="user", id="alice")
    agent = Agent(name="s", llm=echo_prompt(), memory=mem)
    agent.run("remember 777", context=ctx("alice"))
    agent.run("bob here", context=ctx("bob"))
    reply = agent.run("back", context=ctx("alice")).output
    assert "777" not in reply and "Alice likes jazz" in reply
    assert not any(tmp_path.glob("**/primary.json"))


def test_no_cap_keeps_every_user():
    mem = Memory(user_id=resolver, max_users=None)
    agent = Agent(name="s", llm=echo_prompt(), memory=mem)
    for n in range(50):
        agent.run("hi", context=ctx(f"u{n}"))
    assert len(mem.cached_users) == 50


def test_forget_user_drops_window_and_facts_but_not_others():  # acceptance H18 (in-process part)
    mem = Memory(agent_id="support", user_id=resolver)
    agent = Agent(name="s", llm=echo_prompt(), memory=mem)
    mem.persist("Alice fact", tier="user", id="alice")
    mem.persist("Bob fact", tier="user", id="bob")
    agent.run("alice window 1", context=ctx("alice"))
    agent.run("bob window 1", context=ctx("bob"))
    assert mem.forget(tier="user", id="alice") == 1
    assert "alice" not in mem.cached_users
    reply = agent.run("anything?", context=ctx("alice")).output
    assert "alice window 1" not in reply and "Alice fact" not in reply
    bob = agent.run("still there?", context=ctx("bob")).output
    assert "bob window 1" in bob and "Bob fact" in bob


def test_drop_user_keeps_durable_facts():
    mem = Memory(user_id=resolver)
    agent = Agent(name="s", llm=echo_prompt(), memory=mem)
    mem.persist("durable", tier="user", id="alice")
    agent.run("ephemeral", context=ctx("alice"))
    assert mem.drop_user("alice") is True and mem.drop_user("alice") is False
    reply = agent.run("again", context=ctx("alice")).output
    assert "durable" in reply and "ephemeral" not in reply


def test_concurrent_runs_of_one_user_keep_every_turn_in_pairs():  # acceptance H20
    mem = Memory(user_id=resolver, window=1000)
    agent = Agent(name="s", llm=FunctionLLM(lambda ms: "reply to " + (ms[-1].content or ""), delay=0.001), memory=mem)
    errors: list[BaseException] = []

    def worker(k: int):
        try:
            for i in range(25):
                agent.run(f"q{k}-{i}", context=ctx("alice"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    window = mem.for_user("alice").messages
    assert len(window) == 8 * 25 * 2
    for question, answer in zip(window[::2], window[1::2], strict=True):
        assert question.role == "user" and answer.content == f"reply to {question.content}"


def test_concurrent_aruns_of_one_user_keep_every_turn():  # acceptance H20, async
    mem = Memory(user_id=resolver, window=1000)
    agent = Agent(name="s", llm=FunctionLLM(lambda ms: "r:" + (ms[-1].content or "")), memory=mem)

    async def main():
        await asyncio.gather(*(agent.arun(f"q{i}", context=ctx("alice")) for i in range(100)))

    asyncio.run(main())
    window = mem.for_user("alice").messages
    assert len(window) == 200
    assert all(a.content == f"r:{q.content}" for q, a in zip(window[::2], window[1::2], strict=True))


def test_a_resolver_missing_its_key_gets_the_missing_id_hint(caplog):
    mem = Memory(user_id=lambda c: c.state["user_id"])
    agent = Agent(name="s", llm=echo_prompt(), memory=mem)
    with caplog.at_level(logging.WARNING, logger="fastaiagent.memory"):
        agent.run("hi", context=RunContext(state={"name": "alice"}))
    [warning] = [r.getMessage() for r in caplog.records if "resolver" in r.getMessage()]
    assert "KeyError" in warning and "has no user id there" in warning
    assert 'ctx.state["user_id"]' not in warning  # the dict access was right; the key is missing


# -- a resolved user id is an id, never a wildcard ------------------------------


def _facts_for_two_users(mem: Memory) -> None:
    mem.persist("Bob's address is 1 Main St", tier="user", id="bob")
    mem.persist("Alice's card ends 4242", tier="user", id="alice")


@pytest.mark.parametrize(
    "junk", ["*", "   ", True, ["alice"], 1.5, "u" * 10_000, "a\x00b", "lone \ud800 surrogate"]
)
def test_a_resolver_returning_a_non_id_is_refused_on_every_path(tmp_path, caplog, junk):
    seen: list[str] = []
    llm = FunctionLLM(lambda messages: seen.append(prompt_text(messages)) or "ok")
    mem = Memory(f"sqlite:///{tmp_path / 'm.db'}", user_id=lambda c: junk)
    _facts_for_two_users(mem)
    agent = Agent(name="s", llm=llm, memory=mem)

    async def async_paths() -> None:
        await agent.arun("async secret", context=ctx("x"))
        async for _ in agent.astream("stream secret", context=ctx("x")):
            pass

    with caplog.at_level(logging.WARNING, logger="fastaiagent.memory"):
        agent.run("sync secret", context=ctx("x"))
        asyncio.run(async_paths())
        agent.run("again", context=ctx("x"))
    assert len(seen) == 4
    for prompt in seen:
        assert "Main St" not in prompt and "4242" not in prompt
    assert "secret" not in seen[-1]  # nothing was kept in a window either
    assert mem.cached_users == []
    refused = [r.getMessage() for r in caplog.records if "not a user id" in r.getMessage()]
    assert len(refused) == 1  # once per resolver
    assert "resolver returned" in refused[0]
    assert len(refused[0]) < 1_000  # a 10,000-character id is not logged whole


def test_a_numeric_resolved_id_is_its_text(tmp_path):
    mem = Memory(f"sqlite:///{tmp_path / 'm.db'}", user_id=lambda c: 42)
    mem.persist("Is user forty-two", tier="user", id="42")
    seen: list[str] = []
    agent = Agent(name="s", llm=FunctionLLM(lambda m: seen.append(prompt_text(m)) or "ok"), memory=mem)
    agent.run("hi", context=ctx("x"))
    assert "Is user forty-two" in seen[0]
    assert mem.cached_users == ["42"]


def test_save_inside_a_refused_run_has_no_user(tmp_path):
    mem = Memory(user_id=lambda c: "*")
    errors: list[Exception] = []

    def reply(messages):
        try:
            mem.save(tmp_path / "state")
        except RuntimeError as exc:
            errors.append(exc)
        return "ok"

    Agent(name="s", llm=FunctionLLM(reply), memory=mem).run("hi", context=ctx("x"))
    assert len(errors) == 1 and "needs a current user" in str(errors[0])


@pytest.mark.parametrize("bad", ["*", "", "  ", None])
def test_for_user_refuses_a_wildcard_or_missing_id(bad):
    mem = Memory(user_id=resolver)
    with pytest.raises((ValueError, TypeError), match=r"user_id|for_user"):
        mem.for_user(bad)
