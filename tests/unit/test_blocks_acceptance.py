"""Acceptance items for StaticBlock, memory scoring and PersistentFactBlock (102, 109-112, 121-124)."""

from __future__ import annotations

import json
import re
import time

import pytest

from fastaiagent.agent import Agent, ComposableMemory
from fastaiagent.agent.memory_blocks import PersistentFactBlock, StaticBlock
from fastaiagent.agent.memory_blocks.scoring import Scored, ScoringWeights, blend, rank
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.learn import Fact, MemoryStore
from fastaiagent.llm.message import Message
from fastaiagent.testing import FunctionLLM

HOUR, DAY = 3600.0, 86400.0


@pytest.fixture
def store(tmp_path) -> MemoryStore:
    return MemoryStore(tmp_path / "blocks.db")


def add(store: MemoryStore, text: str, scope_id: str = "alice", *, scope: str = "user",
        age: float = 0.0, confidence: float = 1.0) -> int:
    return store.add(Fact(text, scope=scope, scope_id=scope_id, confidence=confidence,
                          created_at=time.time() - age))


def injected(block: PersistentFactBlock) -> list[str]:
    rendered = block.render("q")
    if not rendered:
        return []
    # heading, preamble, then one `- "<JSON string>" (source, confidence)` per fact
    lines = (rendered[0].content or "").splitlines()[2:]
    return [json.JSONDecoder().raw_decode(line[2:])[0] for line in lines]


# -- StaticBlock (102) -----------------------------------------------------------------


def test_static_block_injects_its_text_every_turn_without_llm_calls():
    prompts: list[list[Message]] = []

    def answer(messages: list[Message]) -> str:
        prompts.append(messages)
        return "ok"

    llm = FunctionLLM(answer)
    memory = ComposableMemory(blocks=[StaticBlock("The user's timezone is UTC+1.")])
    agent = Agent("a", llm, memory=memory)
    for i in range(3):
        agent.run(f"turn {i}")
    assert llm.call_count == 3  # one per run: the block adds none
    for prompt in prompts:
        assert [m.content for m in prompt if m.role == "system"].count(
            "The user's timezone is UTC+1."
        ) == 1


# -- scoring (109-112) ---------------------------------------------------------------


def test_worked_example_from_the_spec():
    """Acceptance 110: the weighted score of the spec's worked example, B 0.750 > C 0.633 > A 0.525."""
    now = 1_000_000.0
    items = [
        Scored("A", 0.85, now - 7 * DAY, 0.5),
        Scored("B", 0.80, now - HOUR, 1.0),
        Scored("C", 0.30, now - 300, 1.0),
    ]
    weights = ScoringWeights(0.3, 0.2, HOUR)
    ranked = rank(items, weights, now=now)
    assert [s.item for s in ranked] == ["B", "C", "A"]
    assert [round(s.score, 3) for s in ranked] == [0.75, 0.633, 0.525]


def test_zero_weights_keep_the_input_order_exactly():
    """Acceptance 109: with both weights 0 the ranking is the similarity order."""
    items = [Scored(i, sim, 0.0, imp) for i, (sim, imp) in enumerate([(0.1, 1.0), (0.9, 0.0),
                                                                        (0.5, 0.5)])]
    ranked = rank(items, ScoringWeights())
    assert [s.item for s in ranked] == [0, 1, 2]
    assert [s.score for s in ranked] == [0.1, 0.9, 0.5]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"recency_weight": 0.7, "importance_weight": 0.4},
            "recency_weight + importance_weight must be <= 1, got 0.7 + 0.4",
        ),
        ({"recency_weight": -0.1}, "recency_weight must be >= 0.0, got -0.1"),
        ({"importance_weight": -0.1}, "importance_weight must be >= 0.0, got -0.1"),
        ({"recency_half_life_seconds": 0}, "recency_half_life_seconds must be > 0, got 0"),
        ({"recency_half_life_seconds": -5}, "recency_half_life_seconds must be > 0, got -5"),
        ({"recency_weight": float("nan")}, "recency_weight must be a finite number, got nan"),
    ],
)
def test_bad_weights_raise(kwargs, message):
    """Acceptance 111: weights summing over 1, a negative weight or a non-positive half-life raise,
    for the scorer and for PersistentFactBlock's keywords."""
    with pytest.raises(ValueError, match=re.escape(message)):
        ScoringWeights(**kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        PersistentFactBlock(scope="user", scope_id="alice", **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"max_facts": 1.5}, InvalidTypeError, "max_facts must be an int, got float 1.5"),
        ({"max_facts": 0}, InvalidValueError, "max_facts must be >= 1, got 0"),
        ({"max_facts": True}, InvalidTypeError, "max_facts must be an int, got bool True"),
        ({"refresh_every": "2"}, InvalidTypeError, "refresh_every must be an int, got str '2'"),
        ({"refresh_every": 0}, InvalidValueError, "refresh_every must be >= 1, got 0"),
        ({"scope": "team"}, InvalidValueError, "scope must be one of 'user', 'project', 'agent', got 'team'"),
        ({"scope_id": 7}, InvalidTypeError, "scope_id must be a str, got int 7"),
        ({"project_id": None}, InvalidTypeError, "project_id must be a str, got NoneType None"),
        ({"recency_weight": "0.5"}, InvalidTypeError, "recency_weight must be a number, got str '0.5'"),
        ({"importance_weight": True}, InvalidTypeError, "importance_weight must be a number, got bool True"),
        ({"heading": ""}, InvalidValueError, "heading cannot be empty"),
        ({"name": ""}, InvalidValueError, "name cannot be empty"),
        ({"store": "facts.db"}, InvalidTypeError, "store must be a FactStore"),
    ],
)
def test_persistent_block_arguments_are_checked_at_construction(kwargs, error, message):
    """A wrong type is a TypeError, a value out of range a ValueError (H6), both naming the argument."""
    kwargs = {"scope": "user", "scope_id": "alice", **kwargs}
    with pytest.raises(error, match=re.escape(message)):
        PersistentFactBlock(**kwargs)


def test_static_block_arguments_are_checked():
    with pytest.raises(InvalidValueError, match="text cannot be empty"):
        StaticBlock("")
    with pytest.raises(InvalidTypeError, match="text must be a str, got int 3"):
        StaticBlock(3)  # type: ignore[arg-type]


def test_missing_importance_defaults_to_one():
    """Acceptance 112: a missing metadata['importance'] counts as 1.0."""
    item = Scored("x", 0.5, 0.0)
    assert item.importance == 1.0
    weights = ScoringWeights(importance_weight=0.5)
    assert blend(0.5, 0.0, item.importance, weights) == pytest.approx(0.75)


# -- PersistentFactBlock (80, 121-124) -----------------------------------------------------


def test_injects_the_newest_max_facts_active_facts(store):
    """Acceptance 121: the newest max_facts active facts of the scope are injected."""
    for i in range(5):
        add(store, f"fact {i}", age=100 - i)
    old = add(store, "old value", age=200)
    new = store.add(Fact("new value", scope="user", scope_id="alice"))
    store.supersede(old, new)
    add(store, "someone else's", scope_id="bob")
    block = PersistentFactBlock(scope="user", scope_id="alice", max_facts=3, store=store)
    assert injected(block) == ["new value", "fact 4", "fact 3"]


def test_star_reads_every_subject(store):
    """Acceptance 122: scope_id="*" reads every subject in the scope."""
    add(store, "alice fact", "alice", age=2)
    add(store, "bob fact", "bob", age=1)
    add(store, "agent fact", "helper", scope="agent")
    block = PersistentFactBlock(scope="user", scope_id="*", store=store)
    assert injected(block) == ["bob fact", "alice fact"]


def test_empty_user_scope_id_reads_nothing(store):
    add(store, "alice fact")
    assert injected(PersistentFactBlock(scope="user", scope_id="", store=store)) == []


def test_empty_agent_scope_id_warns():
    """Acceptance 80: an agent-scope block with an empty scope_id warns."""
    with pytest.warns(UserWarning):
        PersistentFactBlock(scope="agent", scope_id="")


def test_refresh_every_requeries_the_store_every_n_renders(store):
    """Acceptance 123: refresh_every=N re-queries the store every N renders."""
    add(store, "first", age=10)
    block = PersistentFactBlock(scope="user", scope_id="alice", refresh_every=3, store=store)
    assert injected(block) == ["first"]  # render 1 reads the store
    add(store, "second")
    assert injected(block) == ["first"]  # renders 2 and 3 are served from the cache
    assert injected(block) == ["first"]
    assert injected(block) == ["second", "first"]  # render 4 reads again


def test_refresh_every_one_reads_every_render(store):
    block = PersistentFactBlock(scope="user", scope_id="alice", store=store)
    assert injected(block) == []
    add(store, "fresh")
    assert injected(block) == ["fresh"]


def test_importance_comes_from_confidence(store):
    """Acceptance 124: with importance_weight > 0 a confident older fact outranks an unsure newer one."""
    add(store, "curated, older", age=60, confidence=1.0)
    add(store, "learned, newer", age=0, confidence=0.6)
    plain = PersistentFactBlock(scope="user", scope_id="alice", store=store)
    assert injected(plain) == ["learned, newer", "curated, older"]
    weighted = PersistentFactBlock(scope="user", scope_id="alice", importance_weight=0.5,
                                   store=store)
    assert injected(weighted) == ["curated, older", "learned, newer"]


def test_spec_snippet_persistent_fact_block(store):
    add(store, "Cite token-cost claims", "my-agent", scope="agent")
    block = PersistentFactBlock(
        scope="agent",                # 'user' | 'project' | 'agent'
        scope_id="my-agent",          # identifier within scope; "*" = every agent
        project_id="",                # optional project filter
        max_facts=50,                 # newest-first cap
        refresh_every=1,              # re-query store every N renders (1 = always)
        recency_weight=0.0,           # 0.0–1.0
        importance_weight=0.0,        # 0.0–1.0; importance ← learned_memory.confidence
        recency_half_life_seconds=86400.0,  # 1 day; facts decay slower than messages
        store=store,
    )
    assert injected(block) == ["Cite token-cost claims"]
