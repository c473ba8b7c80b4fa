"""A low-rank sketch of a large namespace matrix: the first pass of its dense search.

Exact cosine over a 100k x 384 float32 namespace reads 150 MB per search: 10-12 ms
on one core, bound by memory bandwidth, whatever the arithmetic. A text
embedder's vectors are far from isotropic (all-MiniLM-L6-v2's top 96 principal
directions hold ~88% of their energy; random vectors' hold 25-32%), so a sketch
keeps each row projected on the namespace's top :data:`RANK` directions, a
quarter of the bytes, and the length of the part each projection drops. A
search scores the projections, ranks the best :data:`SHORTLIST` rows exactly,
then also every other row whose dropped part could lift it above the k-th best
found (a bound, ``|q_dropped| * |row_dropped|``): the top k is the exact one, and
on vectors with MiniLM's spectrum the bound lets through a few hundred rows of
100k (``bench/recall_turns.py`` reports ``dense_recall`` against exact search).

A matrix gets a sketch from :data:`SKETCH_FROM` rows, built off the search
path by one background thread per process (the searches before it is ready are
exact), and only when the top directions hold at least :data:`MIN_ENERGY` of
the rows' energy: otherwise a projection would drop what tells rows apart, and
exact search stays.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

logger = logging.getLogger("fastaiagent.facts.index.sketch")

SKETCH_FROM = 32_768  # below this, exact search is a few ms: no sketch
RANK = 96  # directions kept (of 384 for MiniLM)
SHORTLIST = 1024  # rows ranked exactly after the first pass (at least 16 per wanted)
MIN_ENERGY = 0.75  # share of the rows' energy the kept directions must hold
SAMPLE = 8192  # rows the directions are fitted on (evenly spaced)


class SketchView(NamedTuple):
    """Rows ``[0, len(rows))`` of a matrix as projected when a view was taken."""

    basis: Any  # (dimension, RANK) float32
    rows: Any  # (m, RANK) float32: each row's projection
    residual: Any  # (m,) float32: the length of what the projection drops of each row

    def ranked(self, vectors: Any, query: Any, alive: Any, top_k: int, want: int) -> tuple[Any, Any]:
        """Rows of ``vectors[:m]`` and their exact scores against ``query`` (masked
        rows at -inf), among them the exact ``top_k``: the ``want`` best by
        projection, then every other row whose score could still beat the
        ``top_k``-th (its projected score plus the most its dropped part can add,
        ``|q_dropped| * |row_dropped|``), usually a few hundred."""
        import numpy as np

        # einsum stays in this thread: BLAS would wake its pool for a small product
        projected = np.einsum("i,ij->j", query, self.basis)
        approx = np.einsum("ij,j->i", self.rows, projected)
        if alive is not None:
            approx[~alive[: len(approx)]] = -np.inf
        if len(approx) <= want:
            return _scored(np.arange(len(approx)), vectors, query, alive)
        short = np.argpartition(-approx, want - 1)[:want]
        rows, exact = _scored(short, vectors, query, alive)
        bar = np.partition(exact, want - top_k)[want - top_k]  # the top_k-th best so far
        dropped = float(np.sqrt(max(0.0, float(query @ query) - float(projected @ projected))))
        could = approx + dropped * self.residual + 1e-5 >= bar  # 1e-5: float32 rounding
        could[short] = False
        extra = np.flatnonzero(could)
        if not len(extra):
            return rows, exact
        more, more_exact = _scored(extra, vectors, query, alive)
        return np.concatenate([rows, more]), np.concatenate([exact, more_exact])


def _scored(rows: Any, vectors: Any, query: Any, alive: Any) -> tuple[Any, Any]:
    import numpy as np

    exact = np.einsum("ij,j->i", vectors[rows], query)
    if alive is not None:
        exact[~alive[rows]] = -np.inf
    return rows, exact


class Sketch:
    """The projections of a matrix's first ``n`` rows on ``basis`` and the length
    of what each projection drops; grows with the matrix."""

    def __init__(self, basis: Any, rows: Any, residual: Any) -> None:
        self.basis = basis
        self.rows, self.residual = rows, residual  # capacity >= n
        self.n = len(rows)

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes + self.residual.nbytes + self.basis.nbytes)

    @classmethod
    def fit(cls, vectors: Any) -> Sketch | None:
        """A sketch of ``vectors``, or None when their top directions hold less
        than :data:`MIN_ENERGY` of their energy or the vectors are too short for
        a projection to save much (under twice :data:`RANK` numbers)."""
        import numpy as np

        if vectors.shape[1] < 2 * RANK:
            return None
        sample = vectors[:: max(1, len(vectors) // SAMPLE)].astype(np.float64)
        weights, directions = np.linalg.eigh(sample.T @ sample)  # ascending
        total = float(weights.sum())
        if total <= 0 or float(weights[-RANK:].sum()) / total < MIN_ENERGY:
            return None
        basis = np.ascontiguousarray(directions[:, ::-1][:, :RANK], dtype=np.float32)
        rows, residual = _projected(vectors, basis)
        return cls(basis, rows, residual)

    def view(self) -> SketchView:
        n = self.n
        return SketchView(self.basis, self.rows[:n], self.residual[:n])

    def extend(self, vectors: Any) -> None:
        """Project rows appended to the matrix (after the ``n`` held)."""
        import numpy as np

        n, need = self.n, self.n + len(vectors)
        if need > len(self.rows):
            capacity = need + need // 8
            rows = np.empty((capacity, self.basis.shape[1]), dtype=np.float32)
            residual = np.empty(capacity, dtype=np.float32)
            rows[:n], residual[:n] = self.rows[:n], self.residual[:n]
            self.rows, self.residual = rows, residual
        self.rows[n:need], self.residual[n:need] = _projected(vectors, self.basis)
        self.n = need  # counted once written

    def replace(self, row: int, vector: Any) -> None:
        """Row ``row`` of the matrix was rewritten in place."""
        if row < self.n:
            projected, residual = _projected(vector[None, :], self.basis)
            self.rows[row], self.residual[row] = projected[0], residual[0]

    def subset(self, kept: Any) -> Sketch:
        """The sketch of a compacted matrix that keeps rows ``kept``."""
        return Sketch(self.basis, self.rows[kept], self.residual[kept])


def _projected(vectors: Any, basis: Any) -> tuple[Any, Any]:
    """``vectors``' projections on ``basis`` and the lengths the projections drop."""
    import numpy as np

    rows = np.ascontiguousarray(vectors @ basis, dtype=np.float32)
    energy = np.einsum("ij,ij->i", vectors, vectors) - np.einsum("ij,ij->i", rows, rows)
    return rows, np.sqrt(np.maximum(energy, 0.0)).astype(np.float32)


Job = Callable[[], None]


class SketchBuilder:
    """One daemon thread that runs sketch builds, one at a time, in order."""

    def __init__(self) -> None:
        self._reset()
        # A forked child (a pre-fork server's worker) starts with no builder thread
        # and must not inherit the parent's queue or its locks.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._jobs: queue.Queue[Job] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, job: Job) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="fastaiagent-sketch", daemon=True
                )
                self._thread.start()
        self._jobs.put(job)

    def wait(self) -> None:
        """Return once every job submitted so far has run (tests, benches)."""
        self._jobs.join()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except Exception:  # a failed sketch leaves exact search, never a broken index
                logger.exception("a namespace sketch could not be built")
            finally:
                self._jobs.task_done()


BUILDER = SketchBuilder()

__all__ = ["BUILDER", "MIN_ENERGY", "RANK", "SHORTLIST", "SKETCH_FROM", "Sketch", "SketchView"]
