"""The Postgres vector index on a real pgvector server (the pgserver wheel's Postgres 16).

What a user relies on: with the extension present the vectors are also in a
``vector`` column (queryable with pgvector's operators), a fresh worker's first
search runs in the server and ranks exactly as the in-memory path does, an
older table gains the column and is filled once, forgetting leaves no row, and
``pgvector=True`` on a server without the extension fails with a clear error.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from _env import require_module
from fastaiagent.errors import MissingExtraError
from fastaiagent.kb.protocols import Chunk

pytestmark = pytest.mark.postgres
psycopg = require_module("psycopg")
np = require_module("numpy")

from fastaiagent.facts.postgres.store import PostgresFactStore  # noqa: E402
from fastaiagent.facts.postgres.vectors import PostgresVectorIndex  # noqa: E402

DIM = 16


@pytest.fixture
def facts(pgvector_url: str, pg_table: str) -> Iterator[PostgresFactStore]:
    store = PostgresFactStore(pgvector_url, table=pg_table)
    yield store
    store.close()


def _chunks(n: int, namespace: str, seed: int = 0) -> list[Chunk]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIM))
    return [
        Chunk(f"{namespace}-{i}", f"text {i}", vectors[i].tolist(), {"namespace": namespace})
        for i in range(n)
    ]


def _exact(chunks: list[Chunk], query: np.ndarray, k: int) -> list[str]:
    matrix = np.array([c.vector for c in chunks], dtype="float32")
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    scores = matrix @ (query / np.linalg.norm(query))
    return [chunks[i].id for i in np.argsort(-scores, kind="stable")[:k]]


def _raw(facts: PostgresFactStore, query: str, *params: object) -> list[tuple]:
    with psycopg.connect(facts.url, autocommit=True) as conn:
        return conn.execute(query.format(v=f'"{facts.table}_vectors"'), params).fetchall()


def _fresh(facts: PostgresFactStore, **kwargs: object) -> PostgresVectorIndex:
    """An index as a newly started worker opens it."""
    return PostgresVectorIndex(PostgresFactStore(facts.url, table=facts.table), **kwargs)  # type: ignore[arg-type]


def test_vectors_are_in_a_pgvector_column_usable_with_its_operators(facts: PostgresFactStore) -> None:
    index = facts.vector_store()
    assert index.uses_pgvector
    chunks = _chunks(50, "user:alice")
    index.add(chunks)
    rows = _raw(facts, "SELECT count(*) FROM {v} WHERE embedding IS NOT NULL")
    assert rows == [(50,)]
    query = np.asarray(chunks[7].vector)
    literal = "[" + ",".join(map(str, query.tolist())) + "]"
    nearest = _raw(facts, "SELECT id FROM {v} ORDER BY embedding <=> %s::vector LIMIT 1", literal)
    assert nearest == [("user:alice-7",)]


def test_a_fresh_workers_first_search_ranks_as_the_in_memory_path(facts: PostgresFactStore) -> None:
    chunks = _chunks(300, "user:alice", seed=1)
    facts.vector_store().add(chunks + _chunks(100, "user:bob", seed=2))
    rng = np.random.default_rng(3)
    for _ in range(5):
        query = rng.standard_normal(DIM)
        cold = _fresh(facts)  # holds no copy: the search runs in the server
        first = [h.chunk.id for h in cold.search(query.tolist(), 10, namespace="user:alice")]
        assert first == _exact(chunks, query, 10)
        deadline = time.monotonic() + 10
        while not cold.holds_copy("user:alice") and time.monotonic() < deadline:
            time.sleep(0.01)  # the copy loads on a background thread
        assert cold.holds_copy("user:alice")
        again = [h.chunk.id for h in cold.search(query.tolist(), 10, namespace="user:alice")]
        assert again == first
        cold.store.close()


def test_cold_search_sees_only_its_namespace_and_live_rows(facts: PostgresFactStore) -> None:
    index = facts.vector_store()
    alice, bob = _chunks(20, "user:alice"), _chunks(20, "user:bob")
    index.add(alice + bob)
    index.delete(["user:alice-0"])
    query = alice[0].vector
    hits = _fresh(facts).search(query, 40, namespace="user:alice")
    assert {h.chunk.id for h in hits} == {c.id for c in alice[1:]}


def test_an_older_table_gains_the_column_filled_once(facts: PostgresFactStore) -> None:
    old = _fresh(facts, pgvector=False)
    chunks = _chunks(2500, "user:alice", seed=4)  # more than one backfill batch
    old.add(chunks)
    assert not old.uses_pgvector
    columns = _raw(
        facts, "SELECT 1 FROM information_schema.columns WHERE table_name = %s AND column_name = 'embedding'",
        f"{facts.table}_vectors",
    )
    assert columns == []
    upgraded = _fresh(facts)
    assert upgraded.uses_pgvector
    assert _raw(facts, "SELECT count(*) FROM {v} WHERE embedding IS NULL") == [(0,)]
    query = np.random.default_rng(5).standard_normal(DIM)
    got = [h.chunk.id for h in upgraded.search(query.tolist(), 10, namespace="user:alice")]
    assert got == _exact(chunks, query, 10)


def test_forgetting_a_namespace_leaves_no_row_or_vector(facts: PostgresFactStore) -> None:
    index = facts.vector_store()
    index.add(_chunks(30, "user:alice") + _chunks(30, "user:bob"))
    assert index.delete_namespace("user:alice") == 30
    assert _raw(facts, "SELECT count(*) FROM {v} WHERE namespace = 'user:alice'") == [(0,)]
    assert _raw(facts, "SELECT count(*) FROM {v} WHERE embedding IS NOT NULL") == [(30,)]
    assert _fresh(facts).search(_chunks(1, "x")[0].vector, 5, namespace="user:alice") == []


def test_pgvector_false_keeps_the_bytes_path_only(facts: PostgresFactStore) -> None:
    index = _fresh(facts, pgvector=False)
    index.add(_chunks(10, "user:alice"))
    assert not index.uses_pgvector
    assert len(index.search(_chunks(1, "x")[0].vector, 3, namespace="user:alice")) == 3


def test_pgvector_true_without_the_extension_is_a_clear_error(postgres_url: str, pg_table: str) -> None:
    store = PostgresFactStore(postgres_url, table=pg_table)
    try:
        with psycopg.connect(postgres_url) as conn:
            if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone():
                pytest.skip("this Postgres has pgvector; the error needs one without it")
        index = PostgresVectorIndex(store, pgvector=True)
        with pytest.raises(MissingExtraError, match="no 'vector' extension"):
            index.add(_chunks(1, "user:alice"))
        assert PostgresVectorIndex(store).uses_pgvector is False  # auto: searches without it
    finally:
        store.close()


def test_pgvector_must_be_a_bool(facts: PostgresFactStore) -> None:
    with pytest.raises(TypeError, match="pgvector must be True or False"):
        PostgresVectorIndex(facts, pgvector="yes")  # type: ignore[arg-type]


def test_vectors_larger_than_a_page_are_stored_and_found(facts: PostgresFactStore) -> None:
    index = facts.vector_store()  # 3072 dimensions: two copies of 12 KB, more than a page
    rng = np.random.default_rng(6)
    chunks = [
        Chunk(f"big-{i}", "large", rng.standard_normal(3072).tolist(), {"namespace": "user:alice"})
        for i in range(5)
    ]
    index.add(chunks)
    hits = _fresh(facts).search(chunks[3].vector, 1, namespace="user:alice")
    assert [h.chunk.id for h in hits] == ["big-3"]


def test_a_namespace_too_big_for_memory_is_searched_in_the_server(facts: PostgresFactStore) -> None:
    chunks = _chunks(200, "user:alice", seed=8)
    facts.vector_store().add(chunks)
    small = _fresh(facts, cache_bytes=1)  # no namespace fits in memory
    rng = np.random.default_rng(9)
    for _ in range(4):
        query = rng.standard_normal(DIM)
        got = [h.chunk.id for h in small.search(query.tolist(), 5, namespace="user:alice")]
        assert got == _exact(chunks, query, 5)
        time.sleep(0.05)
    assert not small.holds_copy("user:alice")
