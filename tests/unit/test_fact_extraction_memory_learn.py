"""Memory(learn=...) and Memory(summarize=...) end to end (items 60-66)."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass

import pytest

from fastaiagent import Agent, RunContext, trace
from fastaiagent.agent import Memory
from fastaiagent.learn import SOURCE_CONVERSATION, MemoryStore
from fastaiagent.llm.message import Message
from fastaiagent.testing import FunctionLLM

_KNOWN = re.compile(r"^(F\d+): (.*)$", re.MULTILINE)


@dataclass
class Session:
    user_id: str


def ctx(user: str) -> RunContext:
    return RunContext(state=Session(user))


def extractor() -> FunctionLLM:
    """ "FACT: x" states x; "FACT: x | REPLACES: y" changes known fact y."""

    def reply(messages: list[Message]) -> str:
        body = messages[-1].content or ""
        ids = {text.casefold(): fid for fid, text in _KNOWN.findall(body)}
        said = body.split("<<<\n", 1)[1].rsplit("\n>>>", 1)[0]
        facts = []
        for line in said.splitlines():
            match = re.match(r"FACT: (.*?)(?: \| REPLACES: (.*))?$", line.strip())
            if match:
                facts.append(
                    {"fact": match.group(1), "replaces": ids.get((match.group(2) or "").casefold())}
                )
        return json.dumps({"facts": facts})

    return FunctionLLM(reply)


class Recorder:
    """The agent's model: replies with a fixed text and keeps every prompt."""

    def __init__(self, reply: str = "Noted.") -> None:
        self.prompts: list[list[Message]] = []
        self.llm = FunctionLLM(self._answer)
        self.reply = reply

    def _answer(self, messages: list[Message]) -> str:
        self.prompts.append(messages)
        return self.reply


def settle(mem: Memory) -> None:
    """Wait for learning that may run after the reply (when Memory queues it)."""
    flush = getattr(mem, "flush", None)
    if callable(flush):
        assert flush(timeout=30) is not False


def learned(store: MemoryStore, user: str) -> list[str]:
    return [f.fact for f in store.list_active("user", user, limit=None)]


@pytest.fixture
def store(tmp_path) -> MemoryStore:
    return MemoryStore(tmp_path / "learn.db")


def test_learn_extracts_and_persists_each_users_facts(store):
    """Acceptance 60: learn= extracts from each user message and persists for that user, isolated per user."""
    mem = Memory(location=store, user_id=lambda c: c.state.user_id, learn=extractor())
    agent = Agent("support", Recorder().llm, memory=mem)
    agent.run("FACT: Is allergic to peanuts", context=ctx("alice"))
    agent.run("FACT: Has a beagle", context=ctx("bob"))
    agent.run("FACT: Lives in Lyon", context=ctx("alice"))
    settle(mem)
    assert sorted(learned(store, "alice")) == ["Is allergic to peanuts", "Lives in Lyon"]
    assert learned(store, "bob") == ["Has a beagle"]


def test_learn_never_extracts_from_the_assistants_replies(store):
    """Acceptance 61: the assistant's replies are never sent for extraction."""
    llm = extractor()
    mem = Memory(location=store, user_id="alice", learn=llm)
    agent = Agent("a", Recorder(reply="FACT: The assistant is a pirate").llm, memory=mem)
    agent.run("hello there")
    agent.run("FACT: Likes tea")
    settle(mem)
    assert learned(store, "alice") == ["Likes tea"]
    assert all("pirate" not in (m.content or "") for call in llm.calls for m in call)
    assert llm.call_count == 2


def test_learned_facts_have_confidence_source_and_the_runs_trace_id(store):
    """Acceptance 62: learned facts get confidence 0.6, source "learned" and the run's trace id."""
    mem = Memory(location=store, user_id="alice", learn=extractor())
    agent = Agent("a", Recorder().llm, memory=mem)
    with trace.capture() as spans:
        agent.run("FACT: Speaks Dutch")
        settle(mem)
    [fact] = store.list_active("user", "alice")
    assert fact.confidence == 0.6 and fact.source == SOURCE_CONVERSATION
    assert fact.source_trace_id is not None
    assert fact.source_trace_id in {s.trace_id for s in spans.spans}


def test_learned_facts_are_injected_once(store):
    """Acceptance 63: the user fact block injects them; the learning block does not repeat them."""
    recorder = Recorder()
    mem = Memory(location=store, user_id="alice", learn=extractor())
    agent = Agent("a", recorder.llm, memory=mem)
    agent.run("FACT: Has a cat named Miso")
    settle(mem)
    agent.run("what is my cat called?")
    prompt_text = "\n".join(m.content or "" for m in recorder.prompts[-1] if m.role == "system")
    assert prompt_text.count("Has a cat named Miso") == 1


def test_learned_fact_cap_deletes_the_oldest_learned_facts(store):
    """Acceptance 64: beyond max_learned_facts per user the oldest learned facts are deleted."""
    mem = Memory(location=store, user_id="alice", learn=extractor(), max_learned_facts=3)
    agent = Agent("a", Recorder().llm, memory=mem)
    for i in range(6):
        agent.run(f"FACT: learned fact {i}")
    settle(mem)
    assert learned(store, "alice") == ["learned fact 5", "learned fact 4", "learned fact 3"]


def test_learned_fact_cap_never_deletes_persisted_facts(store):
    """Acceptance 65 and H15: the cap counts and deletes only learned facts, never persisted ones."""
    mem = Memory(location=store, user_id="alice", learn=extractor(), max_learned_facts=2)
    mem.persist("Prefers email", tier="user", id="alice")
    mem.persist("VIP customer", tier="user", id="alice")
    agent = Agent("a", Recorder().llm, memory=mem)
    for i in range(4):
        agent.run(f"FACT: learned fact {i}")
    settle(mem)
    facts = learned(store, "alice")
    assert "Prefers email" in facts and "VIP customer" in facts
    assert sorted(f for f in facts if f.startswith("learned")) == ["learned fact 2", "learned fact 3"]


def test_a_changed_preference_supersedes_the_learned_one(store):
    """"prefers email" then "prefers Slack": Slack active, email kept as history."""
    mem = Memory(location=store, user_id="alice", learn=extractor())
    agent = Agent("a", Recorder().llm, memory=mem)
    agent.run("FACT: Prefers email")
    settle(mem)
    agent.run("FACT: Prefers Slack | REPLACES: Prefers email")
    settle(mem)
    assert [f.fact for f in mem.retrieve(tier="user", id="alice")] == ["Prefers Slack"]
    history = store.browse(scope="user", scope_id="alice", include_superseded=True)
    email = next(f for f in history if f.fact == "Prefers email")
    assert email.superseded_by is not None


def test_learn_with_arun_and_concurrent_users(store):
    mem = Memory(location=store, user_id=lambda c: c.state.user_id, learn=extractor())
    agent = Agent("a", Recorder().llm, memory=mem)

    async def main() -> None:
        await asyncio.gather(
            *(agent.arun(f"FACT: fact of {u}", context=ctx(u)) for u in ("u1", "u2", "u3"))
        )

    asyncio.run(main())
    settle(mem)
    for user in ("u1", "u2", "u3"):
        assert learned(store, user) == [f"fact of {user}"]


def test_summarize_adds_a_running_summary_of_older_turns(store):
    """Acceptance 66: summarize= adds a running summary of older turns."""
    recorder = Recorder()
    summarizer = FunctionLLM(lambda messages: "Ada is planning a trip to Lisbon.")
    mem = Memory(location=store, user_id="alice", window=4, summarize=summarizer)
    agent = Agent("a", recorder.llm, memory=mem)
    for i in range(8):
        agent.run(f"message {i} about the Lisbon trip")
    settle(mem)
    agent.run("remind me")
    systems = [m.content or "" for m in recorder.prompts[-1] if m.role == "system"]
    assert any(
        s.startswith("Summary of the earlier conversation:") and '"Ada is planning' in s
        for s in systems
    )
    assert summarizer.call_count >= 1
