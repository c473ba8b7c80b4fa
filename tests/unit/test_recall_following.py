"""The messages said right after a recall's best hits (VectorBlock ``follow_turns``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _vector_fakes import WordHashEmbedder

from fastaiagent.agent.memory_blocks.vector import VectorBlock
from fastaiagent.agent.memory_blocks.vector_following import FOLLOW_DROPS, draw_following
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.sqlite import SQLiteFactStore
from fastaiagent.kb.backends.faiss import FaissVectorStore
from fastaiagent.kb.protocols import NAMESPACE_KEY, Chunk
from fastaiagent.llm.message import AssistantMessage, UserMessage

QUESTION = "Who is your favourite basketball team?"
ANSWER = "The Wolves, no doubt, since I was a kid"
START = 1_700_000_000.0


def said(block: VectorBlock, texts: list[str], at: float, step: float = 30.0) -> None:
    for n, text in enumerate(texts):
        message = UserMessage(text) if n % 2 == 0 else AssistantMessage(text)
        block.on_message(message, at=at + n * step)


def recall(tmp_path: Path, *, gap: float = 30.0, **options: object) -> list[str]:
    """The user asks about their team in a store shared with another user who talks
    about basketball too; the answer came ``gap`` seconds after the question. The
    answer's keywords are indexed alone (``context_turns=0``): only following reaches it."""
    tmp_path.mkdir(exist_ok=True)
    store = SQLiteFactStore(tmp_path / "memory.db")
    try:
        def user(name: str) -> VectorBlock:
            return VectorBlock(
                store.vector_store(), embedder=WordHashEmbedder(), top_k=3, namespace=name,
                min_content_chars=1, context_turns=0, **options,  # type: ignore[arg-type]
            )  # fmt: skip

        ana, bob = user("user:ana"), user("user:bob")
        said(ana, [f"note {i}: the {i % 7} crates went out" for i in range(40)], START - 86_400)
        said(ana, ["my team at work ships on Friday", "is it my turn to cook?"], START - 3_600)
        ana.on_message(UserMessage(QUESTION), at=START)
        ana.on_message(AssistantMessage(ANSWER), at=START + gap)
        said(ana, ["lunch was pasta again", "the bus was late"], START + gap + 60)
        said(bob, ["Bob's basketball team lost", "Bob's favourite team is the Bulls"], START)
        return [r.chunk.text for r in ana.recall("which basketball team is my favourite?")]
    finally:
        store.close()


def test_the_answer_after_a_hit_is_recalled_though_it_shares_no_word(tmp_path: Path) -> None:
    found = recall(tmp_path)
    assert found[0] == QUESTION and ANSWER in found
    assert not any(text.startswith("Bob") for text in found)  # another user's stay theirs
    # Off, only the words count: the answer has none of the question's.
    assert ANSWER not in recall(tmp_path / "off", follow_turns=0)


def test_a_message_said_hours_later_is_another_conversation(tmp_path: Path) -> None:
    assert ANSWER not in recall(tmp_path, gap=2 * 3600.0)


def chunk(chunk_id: str, after: str | None, namespace: str = "user:ana", at: float = START) -> Chunk:
    metadata: dict[str, object] = {NAMESPACE_KEY: namespace, "created_at": at}
    if after is not None:
        metadata["next"] = after
    return Chunk(id=chunk_id, text=chunk_id, metadata=metadata)


def test_following_ranks_each_turn_below_its_hit_and_reads_only_its_namespace() -> None:
    stored = {
        "a1": chunk("a1", "a2"),
        "a2": chunk("a2", "a3"),
        "a3": chunk("a3", None),
        "b1": chunk("b1", None, namespace="user:bob"),
    }
    candidates = {"hit": chunk("hit", "a1"), "other": chunk("other", "b1")}
    fused = {"hit": 3.0, "other": 2.5}
    read: list[list[str]] = []

    def fetch(ids: list[str]) -> list[Chunk]:
        read.append(list(ids))
        return [stored[i] for i in ids if i in stored]

    draw_following(fused, candidates, fetch, namespace="user:ana", turns=2)
    assert fused["a1"] == 3.0 - FOLLOW_DROPS[0]
    assert fused["a2"] == 3.0 - FOLLOW_DROPS[1]
    assert "a3" not in fused  # two turns only
    assert "b1" not in fused and "b1" not in candidates  # a read by id is not scoped
    assert read == [["a1", "b1"], ["a2"]]  # one store read per turn


def test_a_candidate_keeps_its_own_score_when_that_is_better() -> None:
    candidates = {"hit": chunk("hit", "a1"), "a1": chunk("a1", None)}
    fused = {"hit": 3.0, "a1": 2.9}
    draw_following(fused, candidates, lambda ids: [], namespace="user:ana", turns=1)
    assert fused == {"hit": 3.0, "a1": 2.9}


def test_follow_turns_is_checked() -> None:
    store = FaissVectorStore(dimension=64)
    with pytest.raises(InvalidValueError, match="follow_turns must be <= 3"):
        VectorBlock(store, embedder=WordHashEmbedder(), follow_turns=4)
    with pytest.raises(InvalidTypeError, match="follow_turns must be an int"):
        VectorBlock(store, embedder=WordHashEmbedder(), follow_turns="2")  # type: ignore[arg-type]
