"""VectorBlock: namespaced recall, scoring, window skip, dedupe, batching, failure isolation."""

from __future__ import annotations

import math
import re
import time

import pytest
from _vector_fakes import BrokenEmbedder, WordHashEmbedder

from fastaiagent import trace
from fastaiagent.agent import (
    AgentMemory,
    ComposableMemory,
    MemoryIsolationError,
    SharedMemoryContext,
)
from fastaiagent.agent.memory_blocks.static import StaticBlock
from fastaiagent.agent.memory_blocks.vector import VectorBlock
from fastaiagent.errors import InvalidTypeError, InvalidValueError
from fastaiagent.kb.backends.faiss import FaissVectorStore
from fastaiagent.kb.protocols import Chunk, DimensionMismatchError
from fastaiagent.llm.message import AssistantMessage, SystemMessage, UserMessage


@pytest.fixture
def embedder():
    return WordHashEmbedder()


@pytest.fixture
def store():
    return FaissVectorStore(dimension=64)


def texts(recalled) -> list[str]:
    return [r.chunk.text for r in recalled]


def test_embeds_messages_of_min_length_and_skips_shorter(store, embedder):
    block = VectorBlock(store, embedder=embedder, min_content_chars=10)
    block.on_message(UserMessage("ok"))
    block.on_message(UserMessage("   yes      "))
    block.on_message(UserMessage("I am allergic to peanuts"))
    block.on_message(AssistantMessage("Noted: no peanuts for you."))
    block.flush()
    assert store.count() == 2
    assert {c.text for c in store.chunks("default")} == {
        "I am allergic to peanuts",
        "Noted: no peanuts for you.",
    }
    assert {c.metadata["role"] for c in store.chunks("default")} == {"user", "assistant"}


def test_recalls_top_k_most_similar(store, embedder):
    block = VectorBlock(store, embedder=embedder, top_k=2, retrieval="dense")
    for text in [
        "my dog is called Biscuit",
        "the weather in Paris is rainy",
        "Biscuit the dog loves long walks",
        "I work as a nurse at night",
    ]:
        block.on_message(UserMessage(text))
    recalled = block.recall("what is my dog called")
    assert len(recalled) == 2
    assert set(texts(recalled)) == {"my dog is called Biscuit", "Biscuit the dog loves long walks"}
    assert recalled[0].score >= recalled[1].score


def test_embeddings_are_batched(store, embedder):
    block = VectorBlock(store, embedder=embedder, batch_size=32)
    for i in range(10):
        block.on_message(UserMessage(f"message number {i} about gardening"))
    assert embedder.calls == []  # queued, nothing embedded yet
    block.recall("gardening")
    assert len(embedder.calls[0]) == 10  # one batch for the ten messages
    assert store.count() == 10
    for i in range(40):
        block.on_message(UserMessage(f"more text {i} about cooking"))
    assert any(len(call) == 32 for call in embedder.calls)  # flushed when the batch filled
    block.flush()
    embedder.calls.clear()
    block.on_message(UserMessage("what should I plant in spring?"))
    block.on_message(AssistantMessage("Tulips and daffodils do well in spring."))
    assert [len(call) for call in embedder.calls] == [2]  # a reply ends the turn: one batch


def test_shared_store_namespaces_do_not_mix_and_busy_cannot_crowd_quiet(store, embedder):
    quiet = VectorBlock(store, embedder=embedder, namespace="user:quiet", top_k=3)
    busy = VectorBlock(store, embedder=embedder, namespace="user:busy", top_k=3)
    quiet.on_message(UserMessage("my favourite colour is green"))
    for i in range(100):
        busy.on_message(UserMessage(f"my favourite colour is blue, variant {i}"))
    for retrieval in ("hybrid", "dense", "bm25"):
        quiet.retrieval = busy.retrieval = retrieval
        assert texts(quiet.recall("favourite colour")) == ["my favourite colour is green"]
        assert all("blue" in t for t in texts(busy.recall("favourite colour")))


def test_untagged_chunks_are_read_by_default_namespace_only(store, embedder):
    [vector] = embedder.embed(["company holiday policy is thirty days"])
    store.add([Chunk("kb-1", "company holiday policy is thirty days", vector, {})])
    default = VectorBlock(store, embedder=embedder)
    other = VectorBlock(store, embedder=embedder, namespace="user:alice")
    assert texts(default.recall("holiday policy")) == ["company holiday policy is thirty days"]
    assert other.recall("holiday policy") == []
    default.clear()  # clearing the default namespace keeps untagged chunks
    assert store.count() == 1


class FixedEmbedder:
    """Maps known texts to fixed unit vectors so similarities are exact."""

    dimension = 3

    def __init__(self, table):
        self.table = table

    def embed(self, texts):
        return [self.table[t] for t in texts]


def _unit_at(cos: float) -> list[float]:
    return [cos, math.sqrt(1 - cos * cos), 0.0]


def _worked_example_block(**weights):
    query = "what's my email?"
    store = FaissVectorStore(dimension=3)
    block = VectorBlock(
        store,
        embedder=FixedEmbedder({query: [1.0, 0.0, 0.0]}),
        top_k=3,
        retrieval="dense",
        recency_half_life_seconds=3600.0,
        **weights,
    )
    now = time.time()
    store.add(
        [
            Chunk("A", "my email is alice@old.com", _unit_at(0.85),
                  {"namespace": "default", "created_at": now - 7 * 86400, "importance": 0.5}),
            Chunk("B", "actually it's alice@new.com", _unit_at(0.80),
                  {"namespace": "default", "created_at": now - 3600}),
            Chunk("C", "thanks!", _unit_at(0.30),
                  {"namespace": "default", "created_at": now - 300}),
        ]
    )  # fmt: skip
    return block, query


def test_zero_weights_rank_by_similarity():
    block, query = _worked_example_block()
    recalled = block.recall(query)
    assert [r.chunk.id for r in recalled] == ["A", "B", "C"]
    assert [r.score for r in recalled] == pytest.approx([0.85, 0.80, 0.30], abs=1e-4)


def test_weighted_score_follows_the_worked_example():
    block, query = _worked_example_block(recency_weight=0.3, importance_weight=0.2)
    recalled = block.recall(query)
    assert [r.chunk.id for r in recalled] == ["B", "C", "A"]
    assert [r.score for r in recalled] == pytest.approx([0.75, 0.633, 0.525], abs=2e-3)


def test_missing_importance_defaults_to_one():
    block, query = _worked_example_block(importance_weight=1.0)
    scores = {r.chunk.id: r.score for r in block.recall(query)}
    assert scores["B"] == pytest.approx(1.0) and scores["C"] == pytest.approx(1.0)
    assert scores["A"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"recency_weight": 0.6, "importance_weight": 0.5},
            InvalidValueError,
            "recency_weight + importance_weight must be <= 1, got 0.6 + 0.5",
        ),
        ({"recency_weight": -0.1}, InvalidValueError, "recency_weight must be >= 0.0, got -0.1"),
        ({"importance_weight": -0.1}, InvalidValueError, "importance_weight must be >= 0.0, got -0.1"),
        ({"recency_weight": "0.2"}, InvalidTypeError, "recency_weight must be a number, got str '0.2'"),
        ({"recency_half_life_seconds": 0}, InvalidValueError, "recency_half_life_seconds must be > 0, got 0"),
        ({"recency_half_life_seconds": -5}, InvalidValueError, "recency_half_life_seconds must be > 0, got -5"),
        ({"top_k": 0}, InvalidValueError, "top_k must be >= 1, got 0"),
        ({"top_k": "3"}, InvalidTypeError, "top_k must be an int, got str '3'"),
        ({"top_k": True}, InvalidTypeError, "top_k must be an int, got bool True"),
        ({"namespace": ""}, InvalidValueError, "namespace cannot be empty"),
        ({"namespace": 7}, InvalidTypeError, "namespace must be a str, got int 7"),
        (
            {"retrieval": "fuzzy"},
            InvalidValueError,
            "retrieval must be one of 'hybrid', 'dense', 'bm25', got 'fuzzy'",
        ),
        ({"min_content_chars": -1}, InvalidValueError, "min_content_chars must be >= 0, got -1"),
        ({"min_content_chars": 2.5}, InvalidTypeError, "min_content_chars must be an int, got float 2.5"),
        ({"dense_weight": 1.5}, InvalidValueError, "dense_weight must be <= 1.0, got 1.5"),
        ({"dense_weight": None}, InvalidTypeError, "dense_weight must be a number, got NoneType None"),
        (
            {"dedupe_against_upstream": "yes"},
            InvalidTypeError,
            "dedupe_against_upstream must be True or False, got str 'yes'",
        ),
        ({"roles": ("user", "bot")}, InvalidValueError, "roles must be one of 'system', 'user'"),
        ({"roles": ()}, InvalidValueError, "roles must name at least one message role"),
        ({"batch_size": 0}, InvalidValueError, "batch_size must be >= 1, got 0"),
        ({"context_turns": -1}, InvalidValueError, "context_turns must be >= 0, got -1"),
        ({"context_turns": 1.0}, InvalidTypeError, "context_turns must be an int, got float 1.0"),
        ({"name": ""}, InvalidValueError, "name cannot be empty"),
        ({"embedder": object()}, InvalidTypeError, "embedder must be 'auto', 'local', 'openai[:model]'"),
    ],
)
def test_bad_arguments_raise_at_construction(store, embedder, kwargs, error, message):
    """A wrong type is a TypeError, a value out of range a ValueError, both naming the argument."""
    kwargs = {"embedder": embedder, **kwargs}
    with pytest.raises(error, match=re.escape(message)):
        VectorBlock(store, **kwargs)


def test_a_store_without_search_is_refused(embedder):
    with pytest.raises(TypeError, match=r"VectorBlock needs a VectorStore"):
        VectorBlock(object(), embedder=embedder)  # type: ignore[arg-type]


def test_messages_still_in_the_window_are_not_recalled(store, embedder):
    block = VectorBlock(store, embedder=embedder, top_k=2)
    old = UserMessage("I moved to Lisbon last year")
    recent = [
        UserMessage("I am thinking of moving to Lisbon again"),
        AssistantMessage("Lisbon is lovely"),
    ]
    block.on_message(old)
    for i in range(20):
        block.on_message(UserMessage(f"unrelated chatter number {i} about football"))
    for message in recent:
        block.on_message(message)
    recalled = block.recall("Lisbon", window=recent)
    assert "I moved to Lisbon last year" in texts(recalled)
    assert not {m.content for m in recent} & set(texts(recalled))
    assert len(recalled) == 2  # widened past the window to still fill top_k


def test_composable_memory_skips_window_messages(embedder):
    block = VectorBlock(FaissVectorStore(dimension=64), embedder=embedder, top_k=3)
    memory = ComposableMemory(blocks=[block], primary=AgentMemory(max_messages=2))
    memory.add_message(UserMessage("my sister lives in Oslo"))
    memory.add_message(UserMessage("filler message one here"))
    memory.add_message(UserMessage("does my sister like Oslo?"))
    memory.add_message(AssistantMessage("I do not know about your sister"))
    context = memory.get_context("sister Oslo")
    recalled_text = context[0].content
    assert "my sister lives in Oslo" in recalled_text
    assert "does my sister like Oslo?" not in recalled_text


def test_dedupe_against_upstream_drops_what_an_earlier_block_injected(store, embedder):
    block = VectorBlock(store, embedder=embedder, dedupe_against_upstream=True)
    block.on_message(UserMessage("The user is allergic to peanuts"))
    block.on_message(UserMessage("The user likes peanut-free chocolate"))
    shared = SharedMemoryContext()
    shared._add("static", [SystemMessage("Known: THE USER is   allergic to peanuts.")])
    rendered = block.render_with_context("peanuts", shared)
    assert "peanut-free chocolate" in rendered[0].content
    assert "allergic" not in rendered[0].content
    plain = VectorBlock(store, embedder=embedder)
    assert "allergic" in plain.render_with_context("peanuts", shared)[0].content


def test_trace_reports_scores_and_deduped_count(embedder):
    block = VectorBlock(
        FaissVectorStore(dimension=64), embedder=embedder, dedupe_against_upstream=True
    )
    memory = ComposableMemory(blocks=[StaticBlock("User is allergic to peanuts"), block])
    with trace.capture() as spans:
        memory.add_message(UserMessage("User is allergic to peanuts"))
        memory.add_message(UserMessage("User loves peanut butter cookies"))
        memory.primary.clear()
        memory.get_context("peanuts")
    [read] = spans.named("memory.read.vector")
    assert read.attributes["memory.deduped_count"] == 1
    scores = list(read.attributes["memory.scores"])
    assert len(scores) == 1 and 0 < scores[0] <= 1
    writes = spans.named("memory.write.vector")
    assert [w.attributes["memory.action"] for w in writes] == ["embedded", "embedded"]


def test_a_broken_embedder_degrades_memory_not_the_run(store):
    block = VectorBlock(store, embedder=BrokenEmbedder())  # building it loads nothing
    memory = ComposableMemory(blocks=[StaticBlock("pinned"), block])
    memory.add_message(UserMessage("this message will never be embedded"))
    context = memory.get_context("anything")
    assert [m.content for m in context[:1]] == ["pinned"]
    assert context[-1].content == "this message will never be embedded"


def test_auto_embedder_is_resolved_at_first_use_not_at_construction(store, monkeypatch):
    import fastaiagent.kb.embedding as embedding

    def boom(spec="auto"):
        raise ImportError("no embedder available: pip install 'fastaiagent[local]'")

    monkeypatch.setattr(embedding, "get_embedder", boom)
    block = VectorBlock(store)  # fine: nothing resolved yet
    memory = ComposableMemory(blocks=[block])
    memory.add_message(UserMessage("hello there, how are you"))
    assert [m.content for m in memory.get_context("hello")] == ["hello there, how are you"]


def test_embedder_dimension_mismatch_is_a_clear_error(embedder):
    store = FaissVectorStore(dimension=384)
    with pytest.raises(DimensionMismatchError, match="384"):
        VectorBlock(store, embedder=embedder)
    lazy = FaissVectorStore()
    block = VectorBlock(lazy, embedder=embedder)  # store size not known yet
    lazy.add([Chunk("x", "existing", [1.0] * 16, {})])  # someone else fixes it at 16
    block.on_message(UserMessage("a message long enough"))
    with pytest.raises(DimensionMismatchError, match="has dimension 64 but the index has dimension 16"):
        block.recall("message")


def test_clear_deletes_only_its_namespace(store, embedder):
    alice = VectorBlock(store, embedder=embedder, namespace="user:alice")
    bob = VectorBlock(store, embedder=embedder, namespace="user:bob")
    alice.on_message(UserMessage("alice likes climbing mountains"))
    bob.on_message(UserMessage("bob likes climbing mountains"))
    alice.flush()
    bob.flush()
    alice.clear()
    assert store.count("user:alice") == 0
    assert alice.recall("climbing") == []
    assert texts(bob.recall("climbing")) == ["bob likes climbing mountains"]


def test_isolated_copy_is_refused(store, embedder):
    with pytest.raises(MemoryIsolationError, match="build a new VectorBlock with its own store"):
        VectorBlock(store, embedder=embedder).isolated_copy()


def test_a_new_block_on_an_existing_store_finds_old_messages_by_keyword(store, embedder):
    first = VectorBlock(store, embedder=embedder, namespace="user:carol")
    first.on_message(UserMessage("my passport number ends in 4471"))
    first.flush()
    restarted = VectorBlock(store, embedder=embedder, namespace="user:carol", retrieval="bm25")
    assert texts(restarted.recall("passport 4471")) == ["my passport number ends in 4471"]


def test_save_flushes_and_load_restores(tmp_path, store, embedder):
    block = VectorBlock(store, embedder=embedder)
    block.on_message(UserMessage("remember that the meeting is on Friday"))
    memory = ComposableMemory(blocks=[block])
    memory.save(tmp_path / "mem")
    assert store.count() == 1  # queued message embedded before saving
    again = VectorBlock(store, embedder=embedder)
    ComposableMemory(blocks=[again]).load(tmp_path / "mem")
    assert texts(again.recall("meeting Friday")) == ["remember that the meeting is on Friday"]
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"vector state file .*bad\.json is corrupt"):
        again.load(tmp_path / "bad.json")


def test_hybrid_finds_exact_terms_that_dense_similarity_ranks_low(store):
    class Blurry(WordHashEmbedder):
        """Dense side that ignores rare tokens (like a model that blurs ids)."""

        def embed(self, texts):
            return super().embed([" ".join(w for w in t.split() if not w.isdigit()) for t in texts])

    block = VectorBlock(store, embedder=Blurry(), top_k=1)
    block.on_message(UserMessage("order 99812 shipped to my home address"))
    for i in range(5):
        block.on_message(UserMessage(f"order shipped to my home address, variant {i} {i}"))
    assert texts(block.recall("where is order 99812")) == ["order 99812 shipped to my home address"]


def test_keywords_of_the_previous_turn_help_find_an_answer(store, embedder):
    block = VectorBlock(store, embedder=embedder, top_k=2, retrieval="bm25")
    block.on_message(AssistantMessage("What pet did you adopt last month?"))
    block.on_message(UserMessage("A tiny grey kitten called Smudge"))
    for i in range(5):
        block.on_message(UserMessage(f"filler line {i} about groceries and errands"))
    assert "A tiny grey kitten called Smudge" in texts(block.recall("which pet was adopted?"))
    plain = VectorBlock(FaissVectorStore(dimension=64), embedder=embedder, retrieval="bm25",
                        top_k=2, context_turns=0)  # fmt: skip
    plain.on_message(AssistantMessage("What pet did you adopt last month?"))
    plain.on_message(UserMessage("A tiny grey kitten called Smudge"))
    assert texts(plain.recall("which pet was adopted?")) == ["What pet did you adopt last month?"]


def test_save_keeps_the_recent_turn_context(tmp_path, store, embedder):
    block = VectorBlock(store, embedder=embedder, retrieval="bm25", top_k=2)
    block.on_message(AssistantMessage("Which city are you moving to?"))
    block.save(tmp_path / "v.json")
    again = VectorBlock(store, embedder=embedder, retrieval="bm25", top_k=2)
    again.load(tmp_path / "v.json")
    again.on_message(UserMessage("Probably Vancouver next spring"))
    assert "Probably Vancouver next spring" in texts(again.recall("which city is the move to?"))


def test_a_dead_embedder_keeps_a_bounded_queue(store):
    block = VectorBlock(store, embedder=BrokenEmbedder(), batch_size=10_000)
    for i in range(1500):
        block.on_message(UserMessage(f"message {i} that cannot be embedded"))
    with pytest.raises(RuntimeError, match="model weights not found"):  # the embedder's own error
        block.flush()
    assert len(block._pending) == 1000


def test_concurrent_messages_and_recalls_on_one_block(store, embedder):
    import threading

    block = VectorBlock(store, embedder=embedder, top_k=3, batch_size=4)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(20):
                block.on_message(UserMessage(f"thread {n} message {i} about sailing"))
                block.recall("sailing")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    block.flush()
    assert not errors, errors
    assert store.count("default") == 80
    assert len({c.id for c in store.chunks("default")}) == 80


# -- the extension points: make_chunk and embedding_text (public), their old private names ----


def test_make_chunk_is_the_public_extension_point(store, embedder):
    class Weighted(VectorBlock):
        def make_chunk(self, message):
            chunk = super().make_chunk(message)
            if chunk is not None:
                chunk.metadata["importance"] = 0.3 if "chatter" in chunk.text else 1.0
            return chunk

    block = Weighted(store, embedder=embedder, min_content_chars=1)
    block.on_message(UserMessage("some chatter about lunch"))
    block.on_message(UserMessage("skip me"))
    block.flush()
    assert {c.text: c.metadata["importance"] for c in store.chunks("default")} == {
        "some chatter about lunch": 0.3,
        "skip me": 1.0,
    }


def test_a_subclass_overriding_the_old_make_chunk_is_still_called_and_warned(store, embedder):
    with pytest.warns(DeprecationWarning, match=r"VectorBlock\._make_chunk .*VectorBlock\.make_chunk"):

        class Old(VectorBlock):
            def _make_chunk(self, message):
                if "secret" in (message.content or ""):
                    return None
                chunk = super()._make_chunk(message)
                assert chunk is not None
                chunk.metadata["turn"] = "t1"
                return chunk

    class Older(Old):  # inherits the old hook: still called, no second warning
        pass

    for cls in (Old, Older):
        block = cls(store, embedder=embedder, namespace=cls.__name__)
        block.on_message(UserMessage("my secret is 1234"))
        block.on_message(UserMessage("I adopted a puppy"))
        block.flush()
        assert [(c.text, c.metadata["turn"]) for c in store.chunks(cls.__name__)] == [
            ("I adopted a puppy", "t1")
        ]


def test_embedding_text_is_public_and_the_old_name_still_works(store):
    seen: list[str] = []

    class Recording(WordHashEmbedder):
        def embed(self, texts):
            seen.extend(texts)
            return super().embed(texts)

    class Contextual(VectorBlock):
        def embedding_text(self, chunk):
            return f"[{chunk.metadata['role']}] {chunk.text}"

    with pytest.warns(DeprecationWarning, match="embedding_text"):

        class Old(VectorBlock):
            def _embedding_text(self, chunk):
                return chunk.text.upper()

    Contextual(store, embedder=Recording(), namespace="a").on_message(
        AssistantMessage("the puppy is a beagle")
    )
    Old(store, embedder=Recording(), namespace="b").on_message(AssistantMessage("the puppy is a beagle"))
    assert seen == ["[assistant] the puppy is a beagle", "THE PUPPY IS A BEAGLE"]
    # What is stored (and keyword-indexed) is the text itself.
    assert [c.text for c in store.chunks("a")] == ["the puppy is a beagle"]


class ScriptBlindEmbedder:
    """Vectors from a table (a model's idea of meaning), with ``understands_cjk`` set."""

    dimension = 2

    def __init__(self, vectors: dict[str, list[float]], understands_cjk: bool) -> None:
        self.vectors = vectors
        self.understands_cjk = understands_cjk

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.vectors.get(text, [0.0, 1.0]) for text in texts]


@pytest.mark.parametrize("understands_cjk", [False, True])
def test_keywords_lead_for_a_script_the_embedder_cannot_read(understands_cjk):
    # The model puts the query next to the wedding-car message (it cannot read Chinese);
    # only the keyword side sees that the bridesmaid message shares "伴娘".
    answer, near = "伴娘请了我大学室友林晓雨", "婚车不租豪车了，就用朋友们的车"
    others = ["蛋糕订了三层的抹茶蛋糕", "签证已经递交了", "请柬打算用电子请柬", "我外婆吃素"]
    vectors = {"伴娘是谁": [1.0, 0.0], near: [0.95, 0.31], answer: [0.2, 0.98]}
    vectors.update({text: [0.6 - 0.1 * i, 0.8] for i, text in enumerate(others)})
    embedder = ScriptBlindEmbedder(vectors, understands_cjk)
    block = VectorBlock(FaissVectorStore(dimension=2), embedder=embedder, top_k=2,
                        min_content_chars=1, context_turns=0)  # fmt: skip
    for text in [answer, near, *others]:
        block.on_message(UserMessage(text))
    first = block.recall("伴娘是谁")[0].chunk.text
    assert first == (near if understands_cjk else answer)


def test_the_packaged_model_says_it_cannot_read_cjk_and_a_custom_one_is_trusted():
    from fastaiagent.kb.embedding import LocalEmbedder

    assert LocalEmbedder().understands_cjk is False
    assert LocalEmbedder(model_path="/models/multilingual").understands_cjk is True
    assert (
        LocalEmbedder(model_path="/models/english", understands_cjk=False).understands_cjk is False
    )
    with pytest.raises(InvalidTypeError, match="understands_cjk"):
        LocalEmbedder(understands_cjk="no")
