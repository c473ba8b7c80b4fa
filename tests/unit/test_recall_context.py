"""What a recall candidate's surroundings say (``Ranking.signals``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from _vector_fakes import WordHashEmbedder, word_block

from fastaiagent.agent.memory_blocks.vector import VectorBlock
from fastaiagent.errors import InvalidTypeError
from fastaiagent.facts.sqlite.store import SQLiteFactStore
from fastaiagent.kb.protocols import NAMESPACE_KEY, Chunk
from fastaiagent.llm.message import UserMessage
from fastaiagent.recall.context import Found, signals, surroundings
from fastaiagent.recall.weights import SIGNALS, Signals


def add_context(fused: dict[str, float], chunks: dict[str, Chunk], found: Found, weights: Signals = SIGNALS) -> None:
    """``fused`` plus what :func:`surroundings` says each candidate gains."""
    for chunk_id, change in surroundings(fused, chunks, found, weights).items():
        fused[chunk_id] += change

START = 1_700_000_000.0
HOUR = 3600.0


def chunk(chunk_id: str, text: str, at: object, after: object = None, **metadata: object) -> Chunk:
    meta = {NAMESPACE_KEY: "n", "created_at": at, "next": after, **metadata}
    return Chunk(chunk_id, text, None, meta)


def test_each_signal_of_a_candidate() -> None:
    chunks = {
        "q": chunk("q", "which team do you like?", START, after="a", speaker="Ana"),
        "a": chunk("a", "the Wolves, no doubt", START + 30, after="x"),
        "x": chunk("x", "lunch", START + 60),  # "a" names it next, but it is no candidate
        "late": chunk("late", "a week later we talked about the Wolves again", START + 7 * 86_400),
    }
    fused = {"q": 2.0, "a": -1.0, "late": 0.5}
    found = signals(fused, chunks, Found({"q", "late"}, "Ana"))
    assert found["q"] == Signals(math.log1p(5), -1.0, -1.0, 1.0, 1.0, 1.0)
    assert found["a"] == Signals(math.log1p(4), 2.0, 2.0, 0.0, 0.0, 0.0)
    # Alone in its conversation: the lowest candidate's score stands in for both.
    assert found["late"][1:4] == (-1.0, -1.0, 1.0)


def test_a_message_hours_later_is_no_neighbour_and_odd_metadata_counts_as_none() -> None:
    chunks = {
        "a": chunk("a", "one", START, after="b"),
        "b": chunk("b", "two", START + 2 * HOUR, after=["c"]),  # next of another type
        "c": chunk("c", "three", "last week"),  # a time that is not a number
    }
    found = signals({"a": 1.0, "b": 0.0, "c": -2.0}, chunks, Found((), None))
    assert [found[i].neighbour for i in "abc"] == [-2.0, -2.0, -2.0]
    assert [found[i].conversation for i in "abc"] == [-2.0, -2.0, -2.0]


def test_add_context_adds_the_weighted_signals() -> None:
    chunks = {"a": chunk("a", "one two three", START), "b": chunk("b", "four?", START + 60)}
    fused = {"a": 1.0, "b": 0.0}
    expected = {
        i: fused[i] + sum(w * v for w, v in zip(SIGNALS, s, strict=True))
        for i, s in signals(fused, chunks, Found({"a"}, None)).items()
    }
    add_context(fused, chunks, Found({"a"}, None))
    assert fused == pytest.approx(expected)
    only_asks = Signals(0, 0, 0, 0, 0, -1.0)
    plain = {"a": 1.0, "b": 0.0}
    add_context(plain, chunks, Found((), None), weights=only_asks)
    assert plain == {"a": 1.0, "b": -1.0}


def recall(tmp_path: Path, **options: Any) -> dict[str, dict[str, float]]:
    """Ana asked about a pet and Sam, in her chat, gave a reply that shares no word
    with her later question (an agent's own reply would rank ``reply_drop`` lower);
    Bob, in the same store, talks about pets at the same moment."""
    tmp_path.mkdir(exist_ok=True)
    store = SQLiteFactStore(tmp_path / "memory.db")
    try:
        ana, bob = (word_block(store, n, steps={"follow_turns": 0, **options}) for n in ("user:ana", "user:bob"))
        for i in range(30):
            ana.on_message(
                UserMessage(f"note {i}: the {i % 7} crates went out"), at=START - 86_400 + i * 60
            )
        ana.on_message(
            UserMessage("which pet did we choose at the shelter, the pet with spots?"), at=START
        )
        ana.on_message(UserMessage("Biscuit, a beagle with brown patches", name="Sam"), at=START + 30)
        ana.on_message(UserMessage("the shelter closes early on Mondays"), at=START + 3 * 86_400)
        ana.on_message(UserMessage("pet insurance is expensive"), at=START + 5 * 86_400)
        for i in range(20):
            bob.on_message(UserMessage(f"Bob's pet shelter story, part {i}"), at=START + i)
        return {r.chunk.text: dict(r.reasons) for r in ana.recall("which pet did we choose at the shelter?")}
    finally:
        store.close()


def test_the_reply_beside_a_hit_is_recalled_through_its_neighbour(tmp_path: Path) -> None:
    found = recall(tmp_path)
    assert list(found)[:2] == [
        "which pet did we choose at the shelter, the pet with spots?",
        "Biscuit, a beagle with brown patches",
    ]
    assert not any(text.startswith("Bob") for text in found)
    # The reply is embedded with the question it answers, so it is a candidate either
    # way; beside its hit it gains, and with the step off it gains nothing.
    assert found["Biscuit, a beagle with brown patches"]["surroundings"] > 0.5
    off = recall(tmp_path / "off", signals=None)
    assert all("surroundings" not in why for why in off.values())


def test_surroundings_is_deprecated_and_must_be_a_bool() -> None:
    store = SQLiteFactStore(":memory:")
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidTypeError, match="surroundings must be True or False"):
        VectorBlock(store.vector_store(), embedder=WordHashEmbedder(), surroundings="yes")  # type: ignore[arg-type]
    store.close()
