"""MatrixCache: the byte budget the SQLite and Postgres vector indexes hold their
namespace matrices in."""

from __future__ import annotations

from dataclasses import dataclass

from fastaiagent.facts.index.matrix import MatrixCache


@dataclass
class Block:
    nbytes: int


def test_the_least_recently_used_goes_first() -> None:
    cache: MatrixCache[Block] = MatrixCache(limit=30)
    for key in ("a", "b", "c"):
        assert cache.put(key, Block(10))
    cache.touch("a")  # now b is the least recently used
    assert cache.put("d", Block(10))
    assert "b" not in cache and {"a", "c", "d"} == {k for k in "abcd" if k in cache}
    assert cache.held == 30


def test_get_does_not_change_the_order() -> None:
    cache: MatrixCache[Block] = MatrixCache(limit=20)
    cache.put("a", Block(10))
    cache.put("b", Block(10))
    assert cache.get("a") == Block(10)
    cache.put("c", Block(10))
    assert "a" not in cache and cache.get("b") is not None and cache.get("zzz") is None


def test_an_item_larger_than_the_budget_is_not_kept_and_evicts_nothing() -> None:
    cache: MatrixCache[Block] = MatrixCache(limit=25)
    cache.put("a", Block(10))
    cache.put("b", Block(10))
    assert cache.put("huge", Block(26)) is False
    assert "huge" not in cache and "a" in cache and "b" in cache and cache.held == 20
    nothing: MatrixCache[Block] = MatrixCache(limit=0)
    assert nothing.put("a", Block(1)) is False and len(nothing) == 0


def test_an_item_grown_in_place_is_measured_again_when_put_again() -> None:
    cache: MatrixCache[Block] = MatrixCache(limit=30)
    grows = Block(10)
    cache.put("a", Block(10))
    cache.put("g", grows)
    grows.nbytes = 25  # a buffer reallocated larger, same object
    assert cache.put("g", grows)
    assert "a" not in cache and cache.held == 25
    cache.pop("g")
    cache.pop("missing")
    assert cache.held == 0 and len(cache) == 0


def test_clear_forgets_everything() -> None:
    cache: MatrixCache[Block] = MatrixCache(limit=100)
    cache.put("a", Block(10))
    cache.clear()
    assert "a" not in cache and cache.held == 0
