"""kb.similarity.cosine: the one cosine the library ranks with."""

from __future__ import annotations

import math
import random
from array import array

import pytest

from fastaiagent.errors import InvalidValueError
from fastaiagent.kb.similarity import best_unit_cosines, cosine, cosines


def test_identical_and_parallel_vectors_score_one():
    assert cosine([0.3, 0.4, 0.5], [0.3, 0.4, 0.5]) == pytest.approx(1.0)
    assert cosine([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)  # length does not matter
    # never a hair above 1 from rounding: callers rely on the documented range
    assert cosine([0.1] * 384, [0.1] * 384) <= 1.0


def test_orthogonal_vectors_score_zero_and_opposite_minus_one():
    assert cosine([1.0, 0.0], [0.0, 1.0]) == 0.0
    assert cosine([1.0, 2.0], [-1.0, -2.0]) == pytest.approx(-1.0)


def test_the_angle_is_what_counts():
    assert cosine([1.0, 0.0], [1.0, 1.0]) == pytest.approx(math.sqrt(0.5))


def test_a_zero_or_empty_vector_scores_zero_instead_of_dividing_by_zero():
    assert cosine([0.0, 0.0, 0.0], [1.0, 2.0, 3.0]) == 0.0
    assert cosine([1.0, 2.0], [0.0, 0.0]) == 0.0
    assert cosine([], []) == 0.0


def test_vectors_of_different_lengths_are_refused():
    with pytest.raises(InvalidValueError, match="different lengths \\(2 and 3\\)"):
        cosine([1.0, 0.0], [1.0, 0.0, 0.0])
    with pytest.raises(ValueError):  # also a plain ValueError for callers that catch that
        cosine([1.0], [])


def test_any_float_sequence_works():
    stored = array("f", [0.6, 0.8])  # the packed float32 form stores keep
    assert cosine((0.6, 0.8), stored) == pytest.approx(1.0, abs=1e-6)


def test_cosines_score_each_vector_as_cosine_does():
    query = [0.3, -1.2, 2.0]
    vectors = [[1.0, 0.0, 0.0], [0.3, -1.2, 2.0], [0.0, 0.0, 0.0], [-0.3, 1.2, -2.0]]
    assert cosines(query, vectors) == [cosine(query, v) for v in vectors]
    with pytest.raises(InvalidValueError):
        cosines(query, [[1.0, 2.0]])


def test_best_unit_cosines_are_the_best_cosine_of_each_group_of_stored_unit_vectors() -> None:
    rng = random.Random(3)

    def unit(size: int) -> list[float]:
        v = [rng.uniform(-1, 1) for _ in range(size)]
        n = math.hypot(*v)
        return [x / n for x in v]

    query = [rng.uniform(-2, 2) for _ in range(16)]  # not unit: normalised inside
    groups = [[unit(16) for _ in range(k)] for k in (1, 2, 5)]
    found = best_unit_cosines(query, groups)
    assert found == pytest.approx([max(cosine(query, v) for v in g) for g in groups], abs=1e-9)
    assert best_unit_cosines([0.0] * 16, groups) == [0.0, 0.0, 0.0]  # no direction
    with pytest.raises(InvalidValueError, match="different lengths"):
        best_unit_cosines(query, [[unit(8)]])
