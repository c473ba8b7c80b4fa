"""Every code snippet of the spec (docs: agent-memory), run as written.

Snippets that build ``LLMClient(provider="openai", ...)`` talk to a local fake
of the OpenAI API (``OPENAI_BASE_URL``), so the code is the spec's code,
unchanged. The few placeholders the spec itself leaves open (``llm=...``,
``store=...``, an undefined ``my_store`` or ``mem``) are given a value in a
preamble, never by editing the snippet. Writes go to a temp working directory.
"""

from __future__ import annotations

import json
import sys
import textwrap
import types
from typing import Any

import pytest

from unit.fake_llm_server import FakeLLMServer, Recorded, Say  # tests/ is on sys.path


def _model(request: Recorded) -> Say:
    """A tiny deterministic 'model' behind the fake OpenAI endpoint."""
    messages = request.body.get("messages", [])
    text = "\n".join(str(m.get("content") or "") for m in messages)
    last = str(messages[-1].get("content") or "") if messages else ""
    if "durable facts" in text.lower() or '"facts"' in text:
        fact = "The user's name is Alice" if "Alice" in last else None
        return Say(json.dumps({"facts": [{"fact": fact, "replaces": None}] if fact else []}))
    if "summar" in text.lower()[:400]:
        return Say("The user introduced themselves.")
    if "What's my name?" in last:
        return Say("Your name is Alice." if "My name is Alice" in text else "I don't know.")
    return Say("Noted.")


@pytest.fixture
def spec_env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FASTAIAGENT_LOCAL_DB", raising=False)
    with FakeLLMServer() as server:
        server.default = _model
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        yield server


def run(snippet: str, preamble: str = "") -> dict[str, Any]:
    module = types.ModuleType("spec_snippet")  # a real module, as dataclasses need
    sys.modules[module.__name__] = module
    namespace: dict[str, Any] = module.__dict__
    exec(compile(textwrap.dedent(preamble), "<preamble>", "exec"), namespace)
    exec(compile(textwrap.dedent(snippet), "<spec snippet>", "exec"), namespace)
    return namespace


RECOMMENDED = '''
from dataclasses import dataclass

from fastaiagent import Agent, LLMClient, Memory, RunContext

llm = LLMClient(provider="openai", model="gpt-4.1")

# Just remember the conversation:
agent = Agent(name="assistant", llm=llm, memory=Memory())

# Personalize per user, multi-user safe, and learn durable facts:
agent = Agent(name="support", llm=llm, memory=Memory(
    user_id=lambda ctx: ctx.state.user_id,   # resolved per run — one agent, many users
    learn=llm,                               # extract + persist durable user facts
))

@dataclass
class Session:
    user_id: str

# Each run names its user through the run context the resolver receives.
agent.run("What's my plan?", context=RunContext(state=Session(user_id="alice")))
'''


def test_recommended_api(spec_env):
    ns = run(RECOMMENDED)
    assert ns["agent"].memory.cached_users == ["alice"]
    assert any(r.path.endswith("/chat/completions") for r in spec_env.requests)


DIRECT = '''
mem = Memory(location="sqlite", agent_id="support")
mem.persist("Return policy is 30 days", tier="global")   # create; returns fact id
mem.persist("Prefers email", tier="user", id="alice")
mem.retrieve(tier="user", id="alice")                    # read → list[Fact]
mem.update("Prefers Slack", old="Prefers email", tier="user", id="alice")  # supersede old, keep history
mem.forget(tier="user", id="alice")                      # delete; returns count
'''


def test_direct_store_use(spec_env, tmp_path):
    ns = run(DIRECT, "from fastaiagent import Memory")
    assert ns["mem"].retrieve(tier="user", id="alice") == []
    assert [f.fact for f in ns["mem"].retrieve(tier="global")] == ["Return policy is 30 days"]
    assert (tmp_path / ".fastaiagent" / "local.db").is_file()


FOR_USER = '''
mem.for_user("alice").save("memory/alice")   # persist Alice's window
mem.for_user("alice").load("memory/alice")   # restore it before her next run
'''


def test_for_user_save_load(spec_env, tmp_path):
    run(FOR_USER, "from fastaiagent import Memory\nmem = Memory(user_id=lambda ctx: ctx.state.user_id)")
    assert (tmp_path / "memory" / "alice" / "primary.json").is_file()


MAX_USERS = '''
mem = Memory(
    location="postgres://user:pw@host:5432/db",
    user_id=lambda ctx: ctx.state.user_id,
    max_users=50_000,          # or None for no cap (memory grows with every new user)
)
'''

LOCATIONS = '''
Memory(location="sqlite")                                  # default local db (single-node)
Memory(location="postgres://user:pw@host:5432/db")         # needs fastaiagent[postgres]
Memory(location="redis://host:6379/0")                     # needs fastaiagent[redis]
Memory(location=my_store)                                  # any object implementing FactStore
'''


def test_construction_snippets_connect_lazily(spec_env):
    assert run(MAX_USERS, "from fastaiagent import Memory")["mem"].config.max_users == 50_000
    run(LOCATIONS, "from fastaiagent import Memory\nfrom fastaiagent.learn import MemoryStore\nmy_store = MemoryStore()")


POSTGRES_STORE = '''
from fastaiagent.learn import PostgresFactStore

store = PostgresFactStore("postgres://user:pw@host:5432/db", min_pool_size=1, max_pool_size=10)
mem = Memory(location=store)
...
store.close()   # releases the connections; the store reopens on its next use
'''


def test_postgres_store_snippet(spec_env):
    ns = run(POSTGRES_STORE, "from fastaiagent import Memory")
    assert ns["mem"].location is ns["store"]


SEMANTIC = '''
mem = Memory(location="sqlite", semantic="auto")   # in-process FAISS + default embedder
mem.persist("The user is allergic to peanuts", tier="user", id="alice")
mem.retrieve("what foods should we avoid?", tier="user", id="alice")   # → the peanut fact
'''


@pytest.mark.embedder
def test_semantic_snippet(spec_env):
    ns = run(SEMANTIC, "from fastaiagent import Memory")
    mem = ns["mem"]
    mem.persist("Prefers window seats on flights", tier="user", id="alice")
    mem.persist("Works as a data engineer", tier="user", id="alice")
    top = mem.retrieve("what foods should we avoid?", tier="user", id="alice")
    assert top[0].fact == "The user is allergic to peanuts"


AGENT_MEMORY = '''
from fastaiagent import Agent, LLMClient
from fastaiagent.agent import AgentMemory

memory = AgentMemory(max_messages=20)

agent = Agent(
    name="assistant",
    system_prompt="Remember what users tell you. Be brief.",
    llm=LLMClient(provider="openai", model="gpt-4.1"),
    memory=memory,
)

agent.run("My name is Alice.")
result = agent.run("What's my name?")
print(result.output)  # "Your name is Alice."
'''

AGENT_MEMORY_PERSISTENCE = '''
memory.save("memory.json")

new_memory = AgentMemory()
new_memory.load("memory.json")

agent = Agent(name="assistant", llm=..., memory=new_memory)
result = agent.run("What's my name?")  # "Your name is Alice."
'''


def test_agent_memory_and_persistence(spec_env):
    ns = run(AGENT_MEMORY)
    assert ns["result"].output == "Your name is Alice."
    # The spec leaves llm=... open; it means "your LLM", here the same client.
    ns = run(AGENT_MEMORY_PERSISTENCE.replace("llm=...", "llm=LLMClient(provider='openai', model='gpt-4.1')"),
             AGENT_MEMORY)
    assert ns["result"].output == "Your name is Alice."


QUICK_START = '''
from fastaiagent import Agent, LLMClient
from fastaiagent.agent import (
    ComposableMemory, AgentMemory,
    StaticBlock, SummaryBlock, VectorBlock, FactExtractionBlock,
)
from fastaiagent.kb.backends.faiss import FaissVectorStore

llm = LLMClient(provider="openai", model="gpt-4o-mini")

memory = ComposableMemory(
    blocks=[
        StaticBlock("The user's name is Upendra and they prefer terse answers."),
        SummaryBlock(llm=llm, keep_last=10, summarize_every=5),
        VectorBlock(store=FaissVectorStore(dimension=384, index_type="flat")),
        FactExtractionBlock(llm=llm, max_facts=100),
    ],
    primary=AgentMemory(max_messages=20),
)

agent = Agent(name="assistant", llm=llm, memory=memory)
'''


@pytest.mark.embedder
def test_composable_quick_start(spec_env):
    ns = run(QUICK_START)
    agent = ns["agent"]
    for text in ("Hello there, I live in Lisbon", "I like long walks by the river", "ok", "What city?"):
        agent.run(text)
    context = ns["memory"].get_context("Which city do I live in?")
    assert context[0].content.startswith("The user's name is Upendra")


BLOCK_SNIPPETS = '''
StaticBlock("The user's timezone is UTC+1. Today's date is 2026-04-18.")

SummaryBlock(
    llm=llm,
    keep_last=10,       # never summarize the N most recent messages
    summarize_every=5,  # refresh cadence
    max_chars=800,      # asked of the LLM, and longer summaries are cut here
)

from fastaiagent.kb.backends.faiss import FaissVectorStore

VectorBlock(
    store=FaissVectorStore(dimension=384, index_type="flat"),
    top_k=5,
    namespace="default",       # tag so multiple blocks can share a store
    min_content_chars=10,      # skip trivial messages ("ok", "yes")
)

FactExtractionBlock(
    llm=llm,                      # use a fast model (gpt-4o-mini, claude-haiku)
    max_facts=200,                # cap; oldest drop on overflow
    extract_every=1,              # run extraction every N inspected messages
    roles=("user", "assistant"),  # which messages to read; ("user",) skips the model's own claims
    inject=True,                  # False = extract (and persist) without rendering
)

FactExtractionBlock(
    llm=llm,
    persist=True,           # write new facts to learned_memory during the run
    scope="user",           # 'user' | 'project' | 'agent'
    scope_id="upendra",     # REQUIRED when persist=True
    confidence=0.6,         # stamped on auto-facts; below curated 1.0 so they sort lower
    max_persisted=200,      # keep the newest N learned facts per subject; None = no cap
)

from fastaiagent.agent.memory_blocks import PersistentFactBlock

PersistentFactBlock(
    scope="agent",                # 'user' | 'project' | 'agent'
    scope_id="my-agent",          # identifier within scope; "*" = every agent
    project_id="",                # optional project filter
    max_facts=50,                 # newest-first cap
    refresh_every=1,              # re-query store every N renders (1 = always)
    # v1.9.0: optional scoring on top of `list_active`'s newest-first order.
    # Defaults are 0.0 — historical behaviour preserved.
    recency_weight=0.0,           # 0.0–1.0
    importance_weight=0.0,        # 0.0–1.0; importance ← learned_memory.confidence
    recency_half_life_seconds=86400.0,  # 1 day; facts decay slower than messages
)
'''

SCORING = '''
VectorBlock(
    store=...,
    top_k=5,
    recency_weight=0.3,                 # 0.0–1.0
    importance_weight=0.2,              # 0.0–1.0
    recency_half_life_seconds=3600.0,   # 1 hour: recency halves every hour
)
'''


def test_block_snippets(spec_env):
    preamble = (
        "from fastaiagent import LLMClient\n"
        "from fastaiagent.agent import StaticBlock, SummaryBlock, VectorBlock, FactExtractionBlock\n"
        "llm = LLMClient(provider='openai', model='gpt-4o-mini')\n"
    )
    run(BLOCK_SNIPPETS, preamble)
    # The spec writes store=... for "your store"; give it one.
    run(SCORING.replace("store=...", "store=FaissVectorStore(dimension=384)"),
        preamble + "from fastaiagent.kb.backends.faiss import FaissVectorStore\n")


PLANE_MEMORY = '''
import fastaiagent as fa

fa.connect(api_key="fa-...", target="https://your-plane.example.com")

agent = fa.Agent(
    name="support",
    llm=llm,
    memory=fa.Memory(
        agent_id="support",                       # local global facts (optional)
        user_id=lambda ctx: ctx.state.user_id,    # one window per user
        plane_agent_id="my-agent-id",             # + the plane's curated facts
    ),
)
'''

PLANE_BLOCK = '''
import fastaiagent as fa
from fastaiagent import Agent, AgentMemory, ComposableMemory
from fastaiagent.agent.memory_blocks import PlaneFactBlock, PersistentFactBlock

fa.connect(api_key="fa-...", target="https://your-plane.example.com")

memory = ComposableMemory(
    primary=AgentMemory(),
    blocks=[
        PlaneFactBlock(
            agent_id="my-agent-id",   # the agent's id on the plane (required)
            category=None,            # optional category filter
            max_facts=50,             # cap per turn (1..200)
            query_conditioned=True,   # pass the user input for semantic recall
            score_threshold=0.0,      # min similarity for query-conditioned recall
            refresh_every=1,          # re-read the plane every N renders (raise to cache)
        ),
        PersistentFactBlock(scope="agent", scope_id="my-agent"),  # local facts too (optional)
    ],
)
agent = Agent(name="support", system_prompt="...", llm=llm, memory=memory)
'''


def test_plane_snippets_degrade_when_the_plane_is_unreachable(spec_env):
    import fastaiagent as fa

    preamble = "from fastaiagent import LLMClient\nllm = LLMClient(provider='openai', model='gpt-4.1')\n"
    try:
        ns = run(PLANE_MEMORY, preamble)
        assert ns["agent"].to_dict()["memory_enabled"] is True
        ns = run(PLANE_BLOCK, preamble)
        assert ns["agent"].run("hello").output == "Noted."
    finally:
        fa.disconnect()


COMPOSABLE_PERSISTENCE = '''
memory.save("/var/state/agent-alice")
# ... later, new process ...
memory = ComposableMemory(blocks=[SummaryBlock(llm=...), FactExtractionBlock(llm=...)])
memory.load("/var/state/agent-alice")
'''


def test_composable_persistence(spec_env, tmp_path):
    state = str(tmp_path / "var" / "state" / "agent-alice")
    preamble = (
        "from fastaiagent import LLMClient\n"
        "from fastaiagent.agent import ComposableMemory, SummaryBlock, FactExtractionBlock\n"
        "llm = LLMClient(provider='openai', model='gpt-4o-mini')\n"
        "memory = ComposableMemory(blocks=[SummaryBlock(llm=llm), FactExtractionBlock(llm=llm)])\n"
    )
    snippet = COMPOSABLE_PERSISTENCE.replace("/var/state/agent-alice", state).replace("llm=...", "llm=llm")
    run(snippet, preamble)
    assert (tmp_path / "var" / "state" / "agent-alice" / "primary.json").is_file()


MOOD = '''
from fastaiagent.agent import MemoryBlock
from fastaiagent.llm.message import Message, SystemMessage


class MoodBlock(MemoryBlock):
    """Tracks the user's emoji reactions and pins the latest mood."""

    name = "mood"

    def __init__(self):
        self.latest_mood = ""

    def on_message(self, message: Message) -> None:
        content = message.content or ""
        for emoji in ("🎉", "😡", "😊", "😢"):
            if emoji in content:
                self.latest_mood = emoji

    def render(self, query: str):
        if not self.latest_mood:
            return []
        return [SystemMessage(f"User's latest mood: {self.latest_mood}")]
'''


def test_custom_mood_block(spec_env):
    ns = run(MOOD)
    from fastaiagent import Agent, LLMClient
    from fastaiagent.agent import ComposableMemory

    memory = ComposableMemory(blocks=[ns["MoodBlock"]()])
    agent = Agent(name="a", llm=LLMClient(provider="openai", model="gpt-4.1"), memory=memory)
    agent.run("We shipped it 🎉")
    assert memory.get_context("q")[0].content == "User's latest mood: 🎉"
