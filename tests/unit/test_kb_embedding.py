"""Embedders: "auto" resolution, clear errors, and the real offline MiniLM model."""

from __future__ import annotations

import math
import re
import threading

import pytest

from fastaiagent.kb import embedding, model_files
from fastaiagent.kb.embedding import Embedder, LocalEmbedder, OpenAIEmbedder, get_embedder


@pytest.fixture(scope="session")
def local_embedder():
    """One loaded model for the whole session (the model cache is process-wide)."""
    made = LocalEmbedder()
    made.embed(["warm up"])
    return made


def test_auto_prefers_the_local_model_when_installed():
    assert isinstance(get_embedder("auto"), LocalEmbedder)
    assert isinstance(get_embedder(None), LocalEmbedder)
    assert get_embedder("auto").dimension == 384


def test_auto_falls_back_to_openai_only_with_a_key(monkeypatch):
    monkeypatch.setattr(embedding, "local_available", lambda: False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    chosen = get_embedder("auto")
    assert isinstance(chosen, OpenAIEmbedder) and chosen.dimension == 1536


def test_auto_without_any_embedder_says_what_to_install(monkeypatch):
    monkeypatch.setattr(embedding, "local_available", lambda: False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ImportError, match=r"fastaiagent\[local\]"):
        get_embedder("auto")


def test_named_specs_and_instances():
    assert isinstance(get_embedder("local"), LocalEmbedder)
    assert get_embedder("openai:text-embedding-3-large").dimension == 3072
    custom = LocalEmbedder()
    assert get_embedder(custom) is custom
    with pytest.raises(ValueError, match="unknown embedder"):
        get_embedder("word2vec")
    with pytest.raises(TypeError, match=r"embedder must have an embed\(texts\) method, got object"):
        get_embedder(object())  # type: ignore[arg-type]

    class NoDimension:
        def embed(self, texts):
            return []

    with pytest.raises(TypeError, match=re.escape("embedder.dimension must be an int, got NoneType None")):
        get_embedder(NoDimension())  # type: ignore[arg-type]
    NoDimension.dimension = 0  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=re.escape("embedder.dimension must be >= 1, got 0")):
        get_embedder(NoDimension())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown dimension for embedding model 'some-unknown-model'"):
        OpenAIEmbedder("some-unknown-model")


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: LocalEmbedder(batch_size=0), ValueError, "batch_size must be >= 1, got 0"),
        (lambda: LocalEmbedder(batch_size="64"), TypeError, "batch_size must be an int, got str '64'"),
        (lambda: LocalEmbedder(device=""), ValueError, "device cannot be empty"),
        (lambda: LocalEmbedder(model_path=3), TypeError, "model_path must be a str, got int 3"),
        (lambda: OpenAIEmbedder(batch_size=0), ValueError, "batch_size must be >= 1, got 0"),
        (lambda: OpenAIEmbedder(dimension=True), TypeError, "dimension must be an int, got bool True"),
        (lambda: OpenAIEmbedder(dimension=0), ValueError, "dimension must be >= 1, got 0"),
        (lambda: OpenAIEmbedder(model=""), ValueError, "model cannot be empty"),
        (lambda: OpenAIEmbedder(api_key=123), TypeError, "api_key must be a str, got int 123"),
    ],
)
def test_embedder_arguments_are_checked_at_construction(make, error, message):
    """A wrong type is a TypeError, a value out of range a ValueError, both naming the argument."""
    with pytest.raises(error, match=re.escape(message)):
        make()


def test_loading_is_lazy_and_a_broken_model_fails_at_first_embed(tmp_path):
    broken = LocalEmbedder(model_path=str(tmp_path / "missing-model"))  # nothing loaded yet
    assert broken.dimension == 384
    with pytest.raises(FileNotFoundError, match="missing-model"):
        broken.embed(["hello"])


def test_embed_refuses_a_bare_string():
    with pytest.raises(TypeError, match="list"):
        LocalEmbedder().embed("hello")  # type: ignore[arg-type]


@pytest.mark.embedder
def test_local_model_embeds_batches_of_unit_vectors(local_embedder):
    assert isinstance(local_embedder, Embedder)
    vectors = local_embedder.embed(
        ["The cat sat on the mat", "A feline rested on a rug", "Stock prices fell"]
    )
    assert len(vectors) == 3 and all(len(v) == 384 for v in vectors)
    assert all(math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, abs_tol=1e-4) for v in vectors)

    def cos(a, b):
        return sum(x * y for x, y in zip(a, b, strict=True))

    assert cos(vectors[0], vectors[1]) > cos(vectors[0], vectors[2])
    assert local_embedder.embed([]) == []


@pytest.mark.embedder
def test_one_model_per_process_shared_across_threads(local_embedder):
    assert LocalEmbedder()._model() is local_embedder._model()
    expected = local_embedder.embed(["thread safety matters"])[0]
    results: list[list[float]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(LocalEmbedder().embed(["thread safety matters"])[0])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(r == pytest.approx(expected, abs=1e-5) for r in results)


@pytest.mark.embedder
def test_peanut_fact_is_found_for_what_foods_to_avoid(local_embedder, tmp_path):
    from fastaiagent.facts.fact import Fact
    from fastaiagent.facts.semantic import SemanticFactIndex
    from fastaiagent.facts.sqlite.store import MemoryStore
    from fastaiagent.recall.facts import search_facts

    store = MemoryStore(tmp_path / "f.db")
    for text in [
        "The user is allergic to peanuts",
        "The user lives in Toronto",
        "The user's favourite colour is teal",
        "The user works night shifts",
    ]:
        store.add(Fact(text, scope="user", scope_id="alice"))
    index = SemanticFactIndex(store, "auto", local_embedder)
    for retrieval in ("hybrid", "dense"):
        index.retrieval = retrieval
        top = search_facts(index, "what foods should we avoid?", "user", "alice", limit=1)
        assert [f.fact for f, _ in top] == ["The user is allergic to peanuts"]
    assert search_facts(index, "what foods should we avoid?", "user", "bob") == []
    store.close()


@pytest.mark.embedder
def test_vector_block_recalls_by_meaning_with_the_real_model(local_embedder):
    from fastaiagent.agent.memory_blocks.vector import VectorBlock
    from fastaiagent.kb.backends.faiss import FaissVectorStore
    from fastaiagent.llm.message import UserMessage

    block = VectorBlock(
        FaissVectorStore(dimension=384, index_type="flat"), embedder=local_embedder, top_k=1
    )
    for text in [
        "I adopted a golden retriever puppy last week",
        "My car needs new tyres before winter",
        "We are planning a trip to Japan in April",
    ]:
        block.on_message(UserMessage(text))
    for retrieval in ("hybrid", "dense"):
        block.retrieval = retrieval
        assert block.recall("tell me about my pet")[0].chunk.text.startswith("I adopted")


TEXTS = [
    "hi",
    "My sister Jane moved to Lisbon last spring and loves the tram rides",
    "peanuts",
    " ".join(["a long message about hiking in the mountains"] * 12),
]


@pytest.mark.embedder
def test_onnx_and_torch_backends_give_the_same_vectors(local_embedder):
    from fastaiagent.kb import onnx_embedding

    onnx = LocalEmbedder(backend="onnx").embed(TEXTS)
    torch = LocalEmbedder(backend="torch").embed(TEXTS)
    assert len(onnx) == len(torch) == len(TEXTS)
    for a, b in zip(onnx, torch, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5
        assert math.isclose(math.fsum(x * x for x in a), 1.0, rel_tol=1e-5)
    assert onnx_embedding.graph_path(model_files.packaged_model()).exists()


@pytest.mark.embedder
def test_auto_falls_back_to_torch_when_onnx_cannot_load(local_embedder, monkeypatch, tmp_path, caplog):
    from fastaiagent.kb import onnx_embedding

    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder should be")
    monkeypatch.setenv(onnx_embedding.CACHE_ENV, str(blocked))
    monkeypatch.setattr(onnx_embedding, "_MODELS", {})
    monkeypatch.setattr(embedding, "_onnx_warned", threading.Event())
    vectors = LocalEmbedder(backend="auto").embed(TEXTS[:2])
    expected = LocalEmbedder(backend="torch").embed(TEXTS[:2])
    assert [v == pytest.approx(e, abs=1e-6) for v, e in zip(vectors, expected, strict=True)] == [True, True]
    assert "runs on torch: ONNX Runtime could not load the model" in caplog.text
    with pytest.raises(OSError, match="not-a-folder"):
        LocalEmbedder(backend="onnx").embed(["x"])


def test_local_backend_is_checked():
    with pytest.raises(ValueError, match="backend must be one of 'auto', 'onnx', 'torch', got 'tf'"):
        LocalEmbedder(backend="tf")
    with pytest.raises(ValueError, match="backend='onnx' runs on the CPU"):
        LocalEmbedder(backend="onnx", device="cuda")
