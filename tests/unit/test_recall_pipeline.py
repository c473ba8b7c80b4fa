"""The recall pipeline (fastaiagent.recall): the query read once, reasons for each place."""

from __future__ import annotations

from typing import Any

from _vector_fakes import WordHashEmbedder

from fastaiagent import trace
from fastaiagent.agent.composable import ComposableMemory
from fastaiagent.agent.memory_blocks.vector import VectorBlock
from fastaiagent.kb.backends.faiss import FaissVectorStore
from fastaiagent.llm.message import UserMessage
from fastaiagent.recall import words
from fastaiagent.recall.query import READS, read_query


class CountingStore(FaissVectorStore):
    """A FAISS store that counts its dense searches (one per widening pass)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.searches = 0

    def search(self, *args: Any, **kwargs: Any) -> Any:
        self.searches += 1
        return super().search(*args, **kwargs)


def test_a_recall_reads_its_query_once_through_every_widening_pass() -> None:
    store = CountingStore(dimension=64)
    block = VectorBlock(store, embedder=WordHashEmbedder(), min_content_chars=1, top_k=5)
    for n in range(40):  # the window's message said again and again: every copy is skipped
        block.on_message(UserMessage("Ana said tea in May", name="Ben"), at=1_700_000_000.0 + n)
    for text in ("coffee beans", "the garden", "a new bike", "our flat", "rainy days", "the bus"):
        block.on_message(UserMessage(text, name="Ana"))
    block.flush()
    window = [UserMessage("Ana said tea in May", name="Ben")]
    before = READS.count
    found = block.recall("What did Ana say about tea now, in May?", window)
    assert READS.count - before == 1  # one RecallQuery, however many passes
    assert store.searches >= 2  # the window hid the first pass's candidates: it widened
    assert found and not any(r.chunk.text.startswith("Ana said") for r in found)


def test_each_result_says_why_it_ranked_there_on_the_trace_span() -> None:
    block = VectorBlock(FaissVectorStore(dimension=64), embedder=WordHashEmbedder(), min_content_chars=1)
    block.on_message(UserMessage("I adopted a puppy named Biscuit", name="Ana"))
    block.on_message(UserMessage("Dogs are great company", name="Ben"))
    block.flush()
    found = block.recall("What did Ana adopt?")
    assert found[0].chunk.text == "I adopted a puppy named Biscuit"
    assert [step for step, _ in found[0].reasons][:2] == ["fused", "speaker"]
    memory = ComposableMemory(blocks=[block])
    with trace.capture() as spans:
        memory.get_context("What did Ana adopt?")
    [read] = spans.named("memory.read.vector")
    reasons = list(read.attributes["memory.recall.reasons"])
    assert reasons[0].startswith("fused +") and "speaker +1.50" in reasons[0]


def test_the_query_is_one_frozen_reading_of_every_cue() -> None:
    query = read_query(
        "What did Jon tell Gina about the budget now, in May 2024?",
        speakers={"Jon", "Gina", "Li"}, now=1_700_000_000.0, replies_to="Which budget?",
    )  # fmt: skip
    assert query.speaker == "Jon" and query.names == {"Jon", "Gina"}
    assert query.embedded == "What did tell about the budget now, in May 2024? Which budget?"
    assert query.said == "What did Jon tell Gina about the budget now, in May 2024? Which budget?"
    assert query.when is not None and query.when.months == {5} and query.when.years == {2024}
    assert query.time_order == 1 and not query.about_replies and query.script == "spaced"
    assert "budget" in query.terms
    assert read_query("现在的预算是多少？", now=0.0).script == "cjk"


def test_the_words_of_every_language_are_one_table() -> None:
    assert words.languages() == ["de", "en", "ja", "zh"]
    assert read_query("Was kostet es jetzt?", now=0.0).time_order == 1
    assert read_query("一开始预计有多少位宾客？", now=0.0).time_order == -1
