"""The sketch of a large namespace matrix: a search over it returns what exact
search returns, also for rows far from the others' directions, follows the rows written,
rewritten and removed after it was built, and is never made for vectors whose
energy does not concentrate (exact search stays)."""

from __future__ import annotations

import numpy as np
import pytest

from fastaiagent.facts.index import matrix as matrix_module
from fastaiagent.facts.index.matrix import Change, NamespaceCopies, unit_rows
from fastaiagent.facts.index.sketch import BUILDER, Sketch

ROWS, DIM, K = 4096, 384, 20


@pytest.fixture(autouse=True)
def small_sketches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sketches from 2,048 rows, 256 rows ranked exactly: the behaviour at a size a unit test affords."""
    monkeypatch.setattr(matrix_module, "SKETCH_FROM", 2048)
    monkeypatch.setattr(matrix_module, "SHORTLIST", 256)


def embedder_like(count: int, seed: int = 3) -> np.ndarray:
    """Unit rows whose energy decays over their directions, as a text embedder's do."""
    rng = np.random.default_rng(seed)
    spectrum = np.exp(-np.arange(DIM) / 30.0)
    rotation, _ = np.linalg.qr(rng.standard_normal((DIM, DIM)))
    rows = (rng.standard_normal((count, DIM)) * spectrum) @ rotation.T
    return unit_rows(rows + 0.8 * rotation[:, 0])  # and a shared direction, as MiniLM's have


def held(vectors: np.ndarray, keys: list[str] | None = None) -> NamespaceCopies:
    copies = NamespaceCopies(2**30)
    keys = keys if keys is not None else [f"k{i}" for i in range(len(vectors))]
    copies.settle("ns", Change(version=1, keys=keys, vectors=vectors))
    BUILDER.wait()
    return copies


def search(copies: NamespaceCopies, query: np.ndarray, top_k: int = K) -> list[tuple[float, object]]:
    view = copies.settle("ns", Change(version=0))  # an older marker: the held copy, as it is
    assert view is not None
    return sorted(view.top(query, top_k), key=lambda hit: -hit[0])


def exact(vectors: np.ndarray, keys: list[str], query: np.ndarray, top_k: int = K) -> list[str]:
    scores = vectors @ query
    return [keys[i] for i in np.argsort(-scores)[:top_k]]


def test_a_sketched_search_finds_what_exact_search_finds() -> None:
    rng = np.random.default_rng(2)
    # 40 rows unlike the rest (as a pasted log among chat lines): the sketch's
    # directions miss them, the bound on what it drops must not
    vectors = np.vstack([embedder_like(ROWS - 40), unit_rows(rng.standard_normal((40, DIM)))])
    keys = [f"k{i}" for i in range(ROWS)]
    copies = held(vectors, keys)
    assert copies.held("ns").sketch is not None  # type: ignore[union-attr]
    queries = np.vstack([
        unit_rows(vectors[:40] + 0.3 * embedder_like(40, seed=9)),
        unit_rows(vectors[-20:] + 0.3 * rng.standard_normal((20, DIM))),
    ])  # fmt: skip
    for query in queries:
        hits = search(copies, query)
        assert [key for _, key in hits] == exact(vectors, keys, query)
        for score, key in hits:  # exact cosines, whatever the first pass
            assert score == pytest.approx(float(vectors[keys.index(str(key))] @ query), abs=1e-5)


def test_vectors_whose_energy_does_not_concentrate_get_no_sketch() -> None:
    rng = np.random.default_rng(5)
    vectors = unit_rows(rng.standard_normal((ROWS, DIM)))
    keys = [f"k{i}" for i in range(ROWS)]
    copies = held(vectors, keys)
    assert copies.held("ns").sketch is None  # type: ignore[union-attr]
    query = vectors[7]
    assert [key for _, key in search(copies, query)] == exact(vectors, keys, query)
    assert Sketch.fit(vectors) is None
    assert Sketch.fit(np.ascontiguousarray(embedder_like(ROWS)[:, :128])) is None  # too short to save


def test_rows_written_rewritten_and_removed_after_the_sketch_are_followed() -> None:
    vectors = embedder_like(ROWS)
    copies = held(vectors)
    probe = embedder_like(3, seed=11)
    copies.settle(
        "ns",
        Change(version=2, since=1, keys=["new", "k5"], vectors=probe[:2], removed=["k9"]),
    )
    assert search(copies, probe[0], 1)[0][1] == "new"  # appended after the sketch
    assert search(copies, probe[1], 1)[0][1] == "k5"  # rewritten in place: its new vector
    assert "k9" not in {key for _, key in search(copies, vectors[9])}  # removed


def test_a_compacted_matrix_keeps_its_sketch_and_its_answers() -> None:
    vectors = embedder_like(ROWS)
    copies = held(vectors)
    gone = [f"k{i}" for i in range(0, ROWS, 2)]  # half the rows: compacted
    copies.settle("ns", Change(version=2, since=1, removed=gone))
    matrix = copies.held("ns")
    assert matrix is not None and matrix.dead == 0 and matrix.sketch is not None
    hits = search(copies, vectors[11])
    assert hits[0][1] == "k11" and not {key for _, key in hits} & set(gone)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_builds_its_own_sketches() -> None:
    import os

    held(embedder_like(ROWS))  # the parent's builder thread has run
    child = os.fork()
    if child == 0:  # the child: a fresh queue and thread, and a sketch built there
        try:
            copies = held(embedder_like(ROWS))
            os._exit(0 if copies.held("ns").sketch is not None else 1)  # type: ignore[union-attr]
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
