"""The messages said right after a recall's best hits (``Ranking.follow_turns``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _vector_fakes import WordHashEmbedder, word_block

from fastaiagent.agent.memory_blocks.vector import VectorBlock
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.facts.sqlite.store import SQLiteFactStore
from fastaiagent.kb.backends.faiss import FaissVectorStore
from fastaiagent.kb.protocols import NAMESPACE_KEY, Chunk
from fastaiagent.llm.message import AssistantMessage, UserMessage
from fastaiagent.recall.following import Fetch, asks, follow
from fastaiagent.recall.weights import Ranking

FOLLOW_DROPS = Ranking().follow_drops

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
        ana, bob = (word_block(store, n, **options) for n in ("user:ana", "user:bob"))
        said(ana, [f"note {i}: the {i % 7} crates went out" for i in range(40)], START - 86_400)
        said(ana, ["my team at work ships on Friday", "is it my turn to cook?"], START - 3_600)
        ana.on_message(UserMessage(QUESTION), at=START)
        ana.on_message(AssistantMessage(ANSWER), at=START + gap)
        said(ana, ["lunch was pasta again", "the bus was late"], START + gap + 60)
        said(bob, ["Bob's basketball team lost", "Bob's favourite team is the Bulls"], START)
        return [r.chunk.text for r in ana.recall("which basketball team is my favourite?")]
    finally:
        store.close()


FOLLOWING = {"follow_turns": 2}  # the step is off by default (docs/semantic.md): on here


def test_the_answer_after_a_hit_is_recalled_though_it_shares_no_word(tmp_path: Path) -> None:
    found = recall(tmp_path, steps=FOLLOWING)
    assert found[0] == QUESTION and ANSWER in found
    assert not any(text.startswith("Bob") for text in found)  # another user's stay theirs
    # Off, only the words count: the answer has none of the question's.
    assert ANSWER not in recall(tmp_path / "off", steps={"follow_turns": 0})


def test_a_message_said_hours_later_is_another_conversation(tmp_path: Path) -> None:
    assert ANSWER not in recall(tmp_path, gap=2 * 3600.0, steps=FOLLOWING)


def chunk(chunk_id: str, after: str | None, namespace: str = "user:ana", at: float = START) -> Chunk:
    metadata: dict[str, object] = {NAMESPACE_KEY: namespace, "created_at": at}
    if after is not None:
        metadata["next"] = after
    return Chunk(id=chunk_id, text=chunk_id, metadata=metadata)


def drawn(
    scores: dict[str, float], chunks: dict[str, Chunk], fetch: Fetch, turns: int, answer_drop: float | None = None
) -> tuple[dict[str, float], dict[str, Chunk]]:
    """The scores after following, and the chunks read; ``scores`` is left as it was."""
    before = dict(scores)
    changes, read = follow(scores, chunks, fetch, namespace="user:ana", turns=turns, hits=3,
                           drops=FOLLOW_DROPS, answer_drop=answer_drop)  # fmt: skip
    assert scores == before  # a pure step: it returns what it adds
    return {i: scores.get(i, 0.0) + changes.get(i, 0.0) for i in {*scores, *changes}}, read


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

    fused, read_chunks = drawn(fused, candidates, fetch, turns=2)
    assert fused["a1"] == 3.0 - FOLLOW_DROPS[0]
    assert fused["a2"] == 3.0 - FOLLOW_DROPS[1]
    assert "a3" not in fused  # two turns only
    assert "b1" not in fused and "b1" not in read_chunks  # a read by id is not scoped
    assert read == [["a1", "b1"], ["a2"]]  # one store read per turn


def test_a_candidate_keeps_its_own_score_when_that_is_better() -> None:
    candidates = {"hit": chunk("hit", "a1"), "a1": chunk("a1", None)}
    fused = {"hit": 3.0, "a1": 2.9}
    assert drawn(fused, candidates, lambda ids: [], turns=1)[0] == {"hit": 3.0, "a1": 2.9}


def test_follow_turns_is_deprecated_and_still_checked() -> None:
    store = FaissVectorStore(dimension=64)
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidValueError, match="follow_turns must be <= 3"):
        VectorBlock(store, embedder=WordHashEmbedder(), follow_turns=4)
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidTypeError, match="follow_turns must be an int"):
        VectorBlock(store, embedder=WordHashEmbedder(), follow_turns="2")  # type: ignore[arg-type]


# -- messages that ask (question_drop) ------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Who is your favourite team?", True),
        ("Did you see it? [shares a photo: a dog on a beach]", False),  # no format of one feed skipped
        ('She said "really?"', True),
        ("Is it done？", True),  # full-width
        ("I asked why? Then I left.", False),  # asked earlier, ends on a statement
        ("The Wolves, no doubt", False),
        ("[a photo]", False),
        ("", False),
    ],
)
def test_asks_reads_the_end_of_a_message(text: str, expected: bool) -> None:
    assert asks(text) is expected


def test_asks_is_linear_on_hostile_text() -> None:
    assert asks(" " * 200_000 + "[" * 50_000 + "?" + " " * 200_000) is True
    assert asks("[" + "x" * 400_000 + "]") is False


def test_only_the_messages_that_ask_rank_lower() -> None:
    from fastaiagent.recall.candidates import Candidates
    from fastaiagent.recall.query import read_query
    from fastaiagent.recall.ranking import rank

    chunks = {"q": Chunk("q", "Who won?", None, {}), "s": Chunk("s", "We won.", None, {})}
    found = Candidates(chunks, (("q", 0.9), ("s", 0.5)), keyword=(("q", 2.0), ("s", 1.0)))
    only = Ranking.off().with_(question_drop=5.0)
    ranked = rank(found, read_query("who won", now=START), only, dense_weight=0.5, fetch=lambda ids: [],
                  namespace="user:ana", speaker=None)  # fmt: skip
    assert [r.chunk.id for r in ranked] == ["s", "q"]
    assert dict(ranked[1].reasons)["asks"] == -5.0 and "asks" not in dict(ranked[0].reasons)


def test_the_reply_to_a_hit_that_asks_ranks_closer_to_it() -> None:
    stored = {"a1": chunk("a1", "a2"), "a2": chunk("a2", None), "s1": chunk("s1", None)}
    question = Chunk("q", "Who won?", None, {**chunk("q", "a1").metadata})
    statement = Chunk("s", "We won.", None, {**chunk("s", "s1").metadata})
    candidates = {"q": question, "s": statement}
    fused = {"q": 3.0, "s": 2.0}
    fused, _ = drawn(fused, candidates, lambda ids: [stored[i] for i in ids], turns=2, answer_drop=0.75)
    assert fused["a1"] == 3.0 - 0.75  # the answer
    assert fused["a2"] == 3.0 - FOLLOW_DROPS[1]  # the turn after it as before
    assert fused["s1"] == 2.0 - FOLLOW_DROPS[0]  # a statement's reply as before


HIKES = [
    "we walked to the lake on Sunday",
    "the trail was muddy after the rain",
    "my boots need new laces",
    "the mountains looked blue at dusk",
    "hiking poles help on the way down",
    "we go camping in summer",
]


def test_a_statement_outranks_a_question_that_matches_the_query_better(tmp_path: Path) -> None:
    """Asked "do you like hiking in the mountains?", the memory is the statement,
    not the question that repeats the query's words; and the question's reply
    rises with it. Another user's statement stays theirs."""
    store = SQLiteFactStore(tmp_path / "memory.db")
    try:
        ana, bob = word_block(store, "user:ana", steps=FOLLOWING), word_block(store, "user:bob")
        said(ana, [f"{text} ({n})" for n, text in enumerate(HIKES * 3)], START - 86_400, 5_000)
        said(ana, ["do you like hiking in the mountains?", "sure, why not"], START)
        said(ana, ["I like hiking in the high mountains"], START + 600)
        said(bob, ["I like hiking in the mountains"], START)
        query = "do you like hiking in the mountains?"
        found = {r.chunk.text: r.score for r in ana.recall(query)}
        assert list(found) == [
            "I like hiking in the high mountains",
            "do you like hiking in the mountains?",
            "sure, why not",
        ]
        plain = {r.chunk.text: r.score for r in word_block(store, "user:ana", steps={**FOLLOWING, "question_drop": 0, "answer_drop": 0}).recall(query)}
        assert list(plain)[:2] == list(found)[1::-1]  # off: the question first
        assert found["sure, why not"] > plain["sure, why not"]  # drawn 2.0 below it when off
    finally:
        store.close()


def test_question_drop_is_deprecated_and_still_checked() -> None:
    store = FaissVectorStore(dimension=64)
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidValueError, match="question_drop must be >= 0"):
        VectorBlock(store, embedder=WordHashEmbedder(), question_drop=-1)
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidTypeError, match="question_drop must be a number"):
        VectorBlock(store, embedder=WordHashEmbedder(), question_drop="0.5")  # type: ignore[arg-type]
