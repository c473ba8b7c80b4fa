"""One VectorStore conformance suite, run against FAISS, Qdrant (local mode) and Chroma."""

from __future__ import annotations

import os
import re
import threading
import uuid

import pytest

from fastaiagent.kb.protocols import Chunk, DimensionMismatchError, VectorStore

DIM = 4


def _faiss(tmp_path):
    from fastaiagent.kb.backends.faiss import FaissVectorStore

    return FaissVectorStore(dimension=DIM, index_type="flat")


def _faiss_lazy(tmp_path):
    from fastaiagent.kb.backends.faiss import FaissVectorStore

    return FaissVectorStore()


def _faiss_hnsw(tmp_path):
    from fastaiagent.kb.backends.faiss import FaissVectorStore

    return FaissVectorStore(dimension=DIM, index_type="hnsw")


def _qdrant(tmp_path):
    from fastaiagent.kb.backends.qdrant import QdrantVectorStore

    return QdrantVectorStore(f"t{uuid.uuid4().hex}", path=":memory:")


def _qdrant_disk(tmp_path):
    from fastaiagent.kb.backends.qdrant import QdrantVectorStore

    return QdrantVectorStore("conformance", path=str(tmp_path / "qdrant"))


def _chroma(tmp_path):
    from fastaiagent.kb.backends.chroma import ChromaVectorStore

    return ChromaVectorStore()


FACTORIES = {
    "faiss": _faiss,
    "faiss-lazy-dim": _faiss_lazy,
    "faiss-hnsw": _faiss_hnsw,
    "qdrant-memory": _qdrant,
    "qdrant-path": _qdrant_disk,
    "chroma": _chroma,
}


@pytest.fixture(params=list(FACTORIES))
def store(request, tmp_path):
    made = FACTORIES[request.param](tmp_path)
    yield made
    close = getattr(made, "close", None)
    if close is not None:
        close()


def vec(*xs: float) -> list[float]:
    return list(xs) + [0.0] * (DIM - len(xs))


def chunk(cid: str, v: list[float], namespace: str | None = None, **meta) -> Chunk:
    metadata = dict(meta)
    if namespace is not None:
        metadata["namespace"] = namespace
    return Chunk(id=cid, text=f"text of {cid}", vector=v, metadata=metadata)


def ids(hits) -> list[str]:
    return [h.chunk.id for h in hits]


def test_is_a_vector_store(store):
    assert isinstance(store, VectorStore)


def test_search_ranks_by_cosine_and_returns_text_and_metadata(store):
    store.add(
        [
            chunk("a", vec(1, 0), "n", importance=0.5),
            chunk("b", vec(1, 1), "n"),
            chunk("c", vec(0, 1), "n"),
        ]
    )
    hits = store.search(vec(2, 0), top_k=3, namespace="n")
    assert ids(hits) == ["a", "b", "c"]
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert hits[1].score == pytest.approx(0.7071, abs=1e-3)
    assert hits[0].chunk.text == "text of a"
    assert hits[0].chunk.metadata == {"namespace": "n", "importance": 0.5}
    assert ids(store.search(vec(2, 0), top_k=1, namespace="n")) == ["a"]
    assert store.search(vec(2, 0), top_k=0, namespace="n") == []


def test_namespace_filter_and_untagged_rule(store):
    store.add(
        [
            chunk("mine", vec(0, 1), "quiet"),
            chunk("loose", vec(1, 0.1)),
            *[chunk(f"busy{i}", vec(1, 0.01 * i), "busy") for i in range(30)],
        ]
    )
    # A busy namespace closer to the query cannot crowd out the quiet one.
    assert ids(store.search(vec(1, 0), top_k=5, namespace="quiet")) == ["mine"]
    assert set(ids(store.search(vec(1, 0), top_k=5, namespace="quiet", include_untagged=True))) == {
        "mine",
        "loose",
    }
    busy = store.search(vec(1, 0), top_k=40, namespace="busy")
    assert len(busy) == 30 and all(h.chunk.id.startswith("busy") for h in busy)
    assert len(store.search(vec(1, 0), top_k=100)) == 32  # None = everything
    assert store.count() == 32
    assert store.count("busy") == 30
    assert store.count("quiet") == 1
    assert store.count("nobody") == 0


def test_upsert_replaces_by_id_and_can_move_namespace(store):
    store.add([chunk("a", vec(1, 0), "n1")])
    store.add([Chunk("a", "new text", vec(0, 1), {"namespace": "n2"})])
    assert store.count() == 1
    assert store.search(vec(1, 0), 5, namespace="n1") == []
    (hit,) = store.search(vec(0, 1), 5, namespace="n2")
    assert hit.chunk.text == "new text"


def test_get_and_chunks(store):
    store.add([chunk("a", vec(1), "n"), chunk("b", vec(0, 1), "n"), chunk("u", vec(0, 0, 1))])
    assert [c.id for c in store.get(["b", "missing", "a"])] == ["b", "a"]
    assert sorted(c.id for c in store.chunks("n")) == ["a", "b"]
    assert sorted(c.id for c in store.chunks("n", include_untagged=True)) == ["a", "b", "u"]
    assert store.chunks("other") == []


def test_delete_by_ids_and_by_namespace_touch_nothing_else(store):
    store.add(
        [
            chunk("a1", vec(1), "a"),
            chunk("a2", vec(1, 1), "a"),
            chunk("b1", vec(1), "b"),
            chunk("u", vec(1)),
        ]
    )
    assert store.delete(["a1", "missing"]) == 1
    assert store.delete(["a1"]) == 0
    assert ids(store.search(vec(1), 5, namespace="a")) == ["a2"]
    assert store.delete_namespace("a") == 1
    assert store.delete_namespace("a") == 0
    assert store.search(vec(1), 5, namespace="a") == []
    assert ids(store.search(vec(1), 5, namespace="b", include_untagged=True)) in (
        ["b1", "u"],
        ["u", "b1"],
    )
    assert store.count() == 2


def test_dimension_mismatch_is_a_clear_error(store):
    store.add([chunk("a", vec(1), "n")])
    assert store.dimension == DIM
    with pytest.raises(DimensionMismatchError, match="dimension"):
        store.add([Chunk("b", "x", [1.0, 0.0], {})])
    with pytest.raises(DimensionMismatchError, match="dimension"):
        store.search([1.0, 0.0], 3, namespace="n")
    assert store.count() == 1


def test_bad_input_is_refused(store):
    with pytest.raises(ValueError, match="chunk 'a' has no vector"):
        store.add([Chunk("a", "no vector", None, {})])
    with pytest.raises(ValueError, match=re.escape("Chunk.id cannot be empty")):
        store.add([Chunk("", "x", vec(1), {})])
    with pytest.raises(TypeError, match=re.escape("Chunk.id must be a str, got int 7")):
        store.add([Chunk(7, "x", vec(1), {})])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"metadata\['namespace'\] must be a str, got int"):
        store.add([Chunk("a", "x", vec(1), {"namespace": 3})])
    with pytest.raises(ValueError, match=re.escape("top_k must be >= 0, got -1")):
        store.search(vec(1), -1)
    with pytest.raises(TypeError, match=re.escape("top_k must be an int, got str '3'")):
        store.search(vec(1), "3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="namespace cannot be empty"):
        store.search(vec(1), 3, namespace="")
    with pytest.raises(TypeError, match=r"delete\(\) takes a list of ids"):
        store.delete("a")


def test_concurrent_adds_and_searches(store):
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(15):
                store.add([chunk(f"w{n}-{i}", vec(1, n, i), f"user{n}")])
                hits = store.search(vec(1, n, i), 3, namespace=f"user{n}")
                assert all(h.chunk.metadata["namespace"] == f"user{n}" for h in hits)
        except BaseException as exc:  # collected and re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert store.count() == 60
    assert all(store.count(f"user{n}") == 15 for n in range(4))


def _store_class(kind: str):
    from fastaiagent.kb.backends.chroma import ChromaVectorStore
    from fastaiagent.kb.backends.faiss import FaissVectorStore
    from fastaiagent.kb.backends.qdrant import QdrantVectorStore

    return {"faiss": FaissVectorStore, "qdrant": QdrantVectorStore, "chroma": ChromaVectorStore}[kind]


@pytest.mark.parametrize(
    ("kind", "kwargs", "error", "message"),
    [
        ("faiss", {"dimension": 0}, ValueError, "dimension must be >= 1, got 0"),
        ("faiss", {"dimension": "384"}, TypeError, "dimension must be an int, got str '384'"),
        ("faiss", {"dimension": True}, TypeError, "dimension must be an int, got bool True"),
        ("faiss", {"index_type": "ivf"}, ValueError, "index_type must be one of 'flat', 'hnsw', got 'ivf'"),
        ("faiss", {"hnsw_m": 1}, ValueError, "hnsw_m must be >= 2, got 1"),
        ("faiss", {"hnsw_m": 32.0}, TypeError, "hnsw_m must be an int, got float 32.0"),
        ("qdrant", {"dimension": -1}, ValueError, "dimension must be >= 1, got -1"),
        ("qdrant", {"dimension": 4.0}, TypeError, "dimension must be an int, got float 4.0"),
        ("qdrant", {"collection_name": ""}, ValueError, "collection_name cannot be empty"),
        ("qdrant", {"collection_name": None}, TypeError, "collection_name must be a str, got NoneType"),
        ("qdrant", {"path": 5}, TypeError, "path must be a str, got int 5"),
        ("qdrant", {"path": "a", "url": "http://x"}, ValueError, "pass only one of path=, url= or client="),
        ("chroma", {"dimension": 0}, ValueError, "dimension must be >= 1, got 0"),
        ("chroma", {"dimension": False}, TypeError, "dimension must be an int, got bool False"),
        ("chroma", {"collection_name": ""}, ValueError, "collection_name cannot be empty"),
        ("chroma", {"path": 5}, TypeError, "path must be a str, got int 5"),
        ("chroma", {"path": "a", "client": object()}, ValueError, "pass path= or client=, not both"),
    ],
)
def test_store_arguments_are_checked_at_construction(kind, kwargs, error, message):
    """A wrong type is a TypeError, a value out of range a ValueError, both naming the argument."""
    with pytest.raises(error, match=re.escape(message)):
        _store_class(kind)(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"k1": -0.5}, ValueError, "k1 must be >= 0, got -0.5"),
        ({"k1": "1.2"}, TypeError, "k1 must be a number, got str '1.2'"),
        ({"b": 1.5}, ValueError, "b must be <= 1.0, got 1.5"),
        ({"b": True}, TypeError, "b must be a number, got bool True"),
    ],
)
def test_bm25_parameters_are_checked(kwargs, error, message):
    from fastaiagent.kb.bm25 import BM25Index

    with pytest.raises(error, match=re.escape(message)):
        BM25Index(**kwargs)


def test_fuse_checks_its_weight():
    from fastaiagent.kb.hybrid import fuse

    with pytest.raises(ValueError, match=re.escape("dense_weight must be <= 1.0, got 2")):
        fuse([("a", 0.5)], [], dense_weight=2)
    assert fuse([("a", 0.5)], [("a", 2.0)], dense_weight=1) == [("a", 0.5)]


def test_qdrant_reopen_keeps_data_and_checks_dimension(tmp_path):
    from fastaiagent.kb.backends.qdrant import QdrantVectorStore, point_id

    path = str(tmp_path / "q")
    first = QdrantVectorStore("c", path=path)
    first.add([chunk("not-a-uuid", vec(1), "n")])
    first.close()
    again = QdrantVectorStore("c", path=path)
    assert again.dimension == DIM
    assert ids(again.search(vec(1), 3, namespace="n")) == ["not-a-uuid"]
    again.close()
    with pytest.raises(DimensionMismatchError, match=f"has dimension {DIM}, but dimension=8 was asked"):
        QdrantVectorStore("c", dimension=8, path=path)
    uid = str(uuid.uuid4())
    assert point_id(uid) == uid
    assert point_id("x") == point_id("x") != point_id("y")


def test_chroma_reopen_checks_dimension(tmp_path):
    from fastaiagent.kb.backends.chroma import ChromaVectorStore

    path = str(tmp_path / "c")
    ChromaVectorStore(path=path).add([chunk("a", vec(1), "n")])
    assert ChromaVectorStore(path=path).dimension == DIM
    with pytest.raises(DimensionMismatchError, match=f"has dimension {DIM}, but dimension=8 was asked"):
        ChromaVectorStore(path=path, dimension=8)


@pytest.mark.skipif(
    not os.environ.get("QDRANT_URL"), reason="set QDRANT_URL to test a Qdrant server"
)
def test_qdrant_server_namespace_filter():
    from fastaiagent.kb.backends.qdrant import QdrantVectorStore

    name = f"fastaiagent_test_{uuid.uuid4().hex}"
    store = QdrantVectorStore(name, url=os.environ["QDRANT_URL"])
    try:
        store.add([chunk("a", vec(1), "n1"), chunk("b", vec(1), "n2")])
        assert ids(store.search(vec(1), 5, namespace="n1")) == ["a"]
        assert store.delete_namespace("n1") == 1
        assert store.count() == 1
    finally:
        store._client.delete_collection(name)


def test_an_add_is_checked_once_for_every_store():
    from fastaiagent.kb.protocols import Dimension, checked_batch

    batch = checked_batch(
        [Chunk("a", "1", [1.0, 0.0], {"namespace": "n"}), Chunk("b", "2", [0.0, 1.0]),
         Chunk("a", "3", [0.5, 0.5], {"namespace": "m"})],
        None,
    )
    assert batch is not None and batch.dimension == 2
    assert [(c.id, c.text) for c in batch.chunks] == [("a", "3"), ("b", "2")]  # last write, first place
    assert batch.keys == ["m", ""] and batch.vectors == [[0.5, 0.5], [0.0, 1.0]]
    assert checked_batch([], 3) is None
    with pytest.raises(TypeError, match="add\\(\\) takes a list of chunks"):
        checked_batch(Chunk("a", "x", [1.0]), None)  # type: ignore[arg-type]
    with pytest.raises(DimensionMismatchError, match="has dimension 3 but the index has dimension 2"):
        checked_batch([Chunk("a", "x", [1.0, 0.0, 0.0])], 2)
    sizes = Dimension(4, "another table")
    assert sizes.agreed(None, "x") == 4 and sizes.agreed(4, "x") == 4
    assert Dimension(None, "another table").agreed(8, "x") == 8
    with pytest.raises(DimensionMismatchError, match=r"t has dimension 8, but dimension=4 was asked; .* another table"):
        sizes.agreed(8, "t")
    assert "vectors have dimension 3 but the index has dimension 4" in str(sizes.refused(3, 4))
    with pytest.raises(ValueError, match="dimension must be >= 1"):
        Dimension(0, "another table")
