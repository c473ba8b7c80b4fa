"""RecallOptions: recall's settings as one checked value, for VectorBlock and Memory(recall=)."""

from __future__ import annotations

import dataclasses
import re

import pytest
from _vector_fakes import WordHashEmbedder

from fastaiagent import Agent, Memory, RunContext
from fastaiagent.agent import RecallOptions, VectorBlock
from fastaiagent.agent.memory_blocks.scoring import ScoringWeights
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.kb.backends.faiss import FaissVectorStore
from fastaiagent.llm.message import UserMessage
from fastaiagent.testing import CannedLLM


@pytest.fixture
def store():
    return FaissVectorStore(dimension=64)


@pytest.fixture
def location(tmp_path):
    return f"sqlite:///{tmp_path / 'facts.db'}"


def test_defaults_are_the_blocks_defaults(store):
    block = VectorBlock(store, embedder=WordHashEmbedder())
    assert block.options == RecallOptions(store=store)
    options = RecallOptions()
    assert (options.store, options.top_k, options.retrieval, options.dedupe) == ("auto", 5, "hybrid", False)
    assert options.weights == ScoringWeights()


def test_options_are_frozen_checked_and_normalised(store):
    options = RecallOptions(roles=["user"], cues=False, dense_weight=1)  # type: ignore[arg-type]
    assert options.roles == ("user",) and options.dense_weight == 1.0 and not options.ranking.participant
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.top_k = 3  # type: ignore[misc]
    bad = [
        ({"top_k": 0}, InvalidValueError, "top_k must be >= 1, got 0"),
        ({"retrieval": "fuzzy"}, InvalidValueError, "retrieval must be one of"),
        ({"roles": ()}, InvalidValueError, "roles must name at least one message role"),
        ({"dedupe": "yes"}, InvalidTypeError, "dedupe must be True or False"),
        ({"cues": "yes"}, InvalidTypeError, "cues must be True or False"),
        ({"recency_weight": 0.7, "importance_weight": 0.5}, InvalidValueError, "must be <= 1"),
        ({"store": "faiss"}, InvalidTypeError, 'store must be "auto" or a VectorStore'),
        ({"store": object()}, InvalidTypeError, 'store must be "auto" or a VectorStore'),
    ]
    for kwargs, error, message in bad:
        with pytest.raises(error, match=re.escape(message)):
            RecallOptions(**kwargs)


def test_a_block_takes_options_or_keywords_not_both(store):
    tuned = RecallOptions(top_k=2, retrieval="dense", recency_weight=0.3, dedupe=True)
    block = VectorBlock(store, embedder=WordHashEmbedder(), options=tuned)
    assert (block.top_k, block.retrieval, block.dedupe_against_upstream) == (2, "dense", True)
    assert block.weights.recency_weight == 0.3
    assert block.options == dataclasses.replace(tuned, store=store)
    same = VectorBlock(store, embedder=WordHashEmbedder(), top_k=2, retrieval="dense",
                       recency_weight=0.3, dedupe_against_upstream=True)  # fmt: skip
    assert same.options == block.options
    with pytest.raises(InvalidValueError, match="not both"):
        VectorBlock(store, embedder=WordHashEmbedder(), top_k=3, options=tuned)
    with pytest.raises(InvalidTypeError, match="options must be a RecallOptions"):
        VectorBlock(store, options={"top_k": 3})  # type: ignore[arg-type]


def test_the_store_can_come_with_the_options(store):
    block = VectorBlock(options=RecallOptions(store=store), embedder=WordHashEmbedder())
    assert block.store is store
    assert VectorBlock(store, options=RecallOptions(store=store)).store is store
    with pytest.raises(InvalidValueError, match="not two different ones"):
        VectorBlock(FaissVectorStore(dimension=64), options=RecallOptions(store=store))
    with pytest.raises(InvalidTypeError, match="VectorBlock needs a VectorStore"):
        VectorBlock(options=RecallOptions())  # "auto" needs a Memory's fact store
    with pytest.raises(InvalidTypeError, match="VectorBlock needs a VectorStore"):
        VectorBlock()


def test_the_block_still_recalls_with_options(store):
    block = VectorBlock(store, embedder=WordHashEmbedder(),
                        options=RecallOptions(top_k=1, retrieval="dense"))  # fmt: skip
    for text in ("my dog is called Biscuit", "the weather in Paris is rainy"):
        block.on_message(UserMessage(text))
    block.flush()
    assert [r.chunk.text for r in block.recall("what is my dog called?")] == [
        "my dog is called Biscuit"
    ]


def test_memory_recall_takes_options_and_each_user_gets_them(store, location):
    tuned = RecallOptions(store=store, top_k=1, min_content_chars=3, retrieval="bm25")
    memory = Memory(location, user_id=lambda ctx: ctx.state["user"], recall=tuned,
                    embedder=WordHashEmbedder())  # fmt: skip
    assert memory.config.recall is tuned and memory.config.recall_options is tuned
    llm = CannedLLM("noted")
    agent = Agent("a", llm, memory=memory)
    for user, text in (("alice", "I adopted a beagle"), ("bob", "I adopted a cat")):
        agent.run(text, context=RunContext(state={"user": user}))
    memory.flush()
    recall_blocks = [b for b in memory._users.get("alice").own_blocks if isinstance(b, VectorBlock)]
    assert len(recall_blocks) == 1
    block = recall_blocks[0]
    assert block.store is store and block.top_k == 1 and block.retrieval == "bm25"
    assert block.namespace == "user:alice"  # the Memory still names each user's namespace
    assert {c.text for c in store.chunks("user:alice")} == {"I adopted a beagle", "noted"}


def test_memory_recall_strings_and_stores_become_options(store, location):
    assert Memory(location).config.recall_options is None
    auto = Memory(location, recall="auto").config.recall_options
    assert auto == RecallOptions()
    shared = Memory(location, recall=store, dedupe=True).config.recall_options
    assert shared == RecallOptions(store=store, dedupe=True)
    # dedupe= turns the options' dedupe on: the same word, one meaning.
    assert Memory(location, recall=RecallOptions(), dedupe=True).config.recall_options == (
        RecallOptions(dedupe=True)
    )


def test_a_block_names_the_recall_options_when_a_keyword_is_not_one(store):
    with pytest.raises(InvalidTypeError, match=r"unexpected keyword.*top_kk.*the recall options are.*cues"):
        VectorBlock(store, embedder=WordHashEmbedder(), top_kk=3)
    # Every option is a keyword of the block, read back the same: one place to add one.
    assert VectorBlock(store, embedder=WordHashEmbedder(), cues=False).options == RecallOptions(store=store, cues=False)
