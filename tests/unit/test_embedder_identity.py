"""An embedder's identity names its model: two models of one size never share
stored vectors or cached embeddings; one model has one identity on ONNX Runtime
and torch; vectors stored before identities named the model read as the packaged one."""

from __future__ import annotations

import shutil
import struct
import zipfile
from pathlib import Path

import pytest

from fastaiagent.facts.index.embedding_cache import CachedEmbedder, identity_of
from fastaiagent.facts.index.reembed import foreign
from fastaiagent.kb.embedding import LocalEmbedder
from fastaiagent.kb.identity import LEGACY_LOCAL_IDENTITY, PACKAGED_IDENTITY, same_embedder
from fastaiagent.kb.model_files import WEIGHTS, model_files
from fastaiagent.learn import MemoryStore

np = pytest.importorskip("numpy")


def packaged_copy(into: Path) -> Path:
    """The packaged model's files in a folder of the test's own."""
    files = model_files(None)
    if files.folder is not None:
        shutil.copytree(files.folder, into)
    else:
        with zipfile.ZipFile(files.location) as archive:
            archive.extractall(into)
    return into


def retrained(folder: Path) -> None:
    """Change every weight a little, as training would (the file keeps its layout)."""
    path = folder / WEIGHTS
    data = bytearray(path.read_bytes())
    (size,) = struct.unpack("<Q", data[:8])
    body = np.frombuffer(bytes(data[8 + size :]), dtype=np.uint8).copy()
    body ^= 1  # the lowest mantissa bit of every float32
    path.write_bytes(bytes(data[: 8 + size]) + body.tobytes())


def test_the_packaged_model_has_one_identity_on_both_paths() -> None:
    assert identity_of(LocalEmbedder()) == PACKAGED_IDENTITY
    assert identity_of(LocalEmbedder(backend="torch")) == PACKAGED_IDENTITY
    assert identity_of(LocalEmbedder(backend="onnx")) == PACKAGED_IDENTITY
    assert PACKAGED_IDENTITY.startswith("all-MiniLM-L6-v2#") and PACKAGED_IDENTITY.endswith("@384")


def test_two_models_of_one_size_have_two_identities(tmp_path: Path) -> None:
    same = packaged_copy(tmp_path / "a" / "minilm")
    other = packaged_copy(tmp_path / "b" / "minilm")
    retrained(other)
    first, second = LocalEmbedder(str(same)), LocalEmbedder(str(other))
    assert first.dimension == second.dimension == 384
    assert identity_of(first) != identity_of(second)  # once both were "LocalEmbedder@384"
    assert identity_of(LocalEmbedder(str(same))) == identity_of(first)  # stable
    assert foreign({"embedder": identity_of(first)}, identity_of(second))
    assert LocalEmbedder(str(same), identity="team-model@384").identity == "team-model@384"


class _Recording:
    """An embedder of its own identity that records what it was asked."""

    dimension = 4

    def __init__(self, identity: str, value: float) -> None:
        self.identity, self.value, self.asked = identity, value, []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.asked += texts
        return [[self.value, 0.0, 0.0, 1.0] for _ in texts]


def test_a_cached_embedding_of_one_model_is_never_handed_to_another(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "memory.db")
    index = store.vector_store(4)
    first, second = _Recording("model-a@4", 1.0), _Recording("model-b@4", -1.0)
    assert CachedEmbedder(first, index, "user:ann").embed(["hello"]) == [[1.0, 0.0, 0.0, 1.0]]
    assert CachedEmbedder(second, index, "user:ann").embed(["hello"]) == [[-1.0, 0.0, 0.0, 1.0]]
    assert second.asked == ["hello"]  # its own model embedded it: the cache held only model A's
    assert CachedEmbedder(first, index, "user:ann").embed(["hello"]) == [[1.0, 0.0, 0.0, 1.0]]
    assert first.asked == ["hello"]  # and model A's came back from the cache
    store.close()


def test_vectors_stored_before_identities_named_the_model_read_as_the_packaged_one() -> None:
    assert same_embedder(LEGACY_LOCAL_IDENTITY, PACKAGED_IDENTITY)
    assert not same_embedder(LEGACY_LOCAL_IDENTITY, "minilm#0123456789abcdef@384")
    assert not foreign({"embedder": LEGACY_LOCAL_IDENTITY}, PACKAGED_IDENTITY)
    assert foreign({"embedder": LEGACY_LOCAL_IDENTITY}, "minilm#0123456789abcdef@384")
