"""The Postgres StoredVectorIndex on a real server: recall that outlives the process.

What a user relies on: search and keyword search read one namespace and survive a
restart; a process sees what other processes wrote (its in-memory matrix is
checked per search); forgetting removes vectors, postings and cached embeddings
from the tables themselves; dimensions never mix; outages raise
StoreUnavailableError; the tables carry a schema version.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from _env import require_module
from fastaiagent.errors import SchemaVersionError, StoreUnavailableError
from fastaiagent.facts.vectors import HoldsVectors, StoredVectorIndex, text_key
from fastaiagent.kb.protocols import Chunk, DimensionMismatchError, VectorStore

pytestmark = pytest.mark.postgres
psycopg = require_module("psycopg")  # a missing driver fails under CI=true
require_module("numpy")

from fastaiagent.facts.postgres.store import PostgresFactStore  # noqa: E402
from fastaiagent.facts.postgres.vectors import PostgresVectorIndex  # noqa: E402


@pytest.fixture
def facts(postgres_url: str, pg_table: str) -> Iterator[PostgresFactStore]:
    store = PostgresFactStore(postgres_url, table=pg_table)
    yield store
    store.close()  # pg_table destroys the store


def _reopen(facts: PostgresFactStore, **kwargs: object) -> PostgresVectorIndex:
    """An index on a new fact store: another process, or the same after a restart."""
    other = PostgresFactStore(facts.url, table=facts.table)
    return PostgresVectorIndex(other, **kwargs)  # type: ignore[arg-type]


def _chunk(cid: str, text: str, vector: list[float], ns: str | None = "user:1") -> Chunk:
    return Chunk(cid, text, vector, {"namespace": ns} if ns else {"kind": "untagged"})


def _raw(facts: PostgresFactStore, query: str, *params: object) -> list[tuple]:
    with psycopg.connect(facts.url, autocommit=True) as conn:
        return conn.execute(query.format(t=facts.table), params).fetchall()


def test_the_store_has_the_capability_and_the_index_is_a_vector_store(facts: PostgresFactStore) -> None:
    index = facts.vector_store()
    assert isinstance(facts, HoldsVectors)
    assert isinstance(index, StoredVectorIndex) and isinstance(index, VectorStore)
    assert index.dimension is None  # nothing added yet
    assert index.search([1.0, 0.0], 3, namespace="user:1") == []


def test_search_ranks_one_namespace_and_survives_a_restart(facts: PostgresFactStore) -> None:
    index = facts.vector_store()
    index.add([
        _chunk("a", "hiking in the alps", [1, 0, 0]),
        _chunk("b", "my dog rex", [0.6, 0.8, 0]),
        _chunk("c", "tax forms", [0, 0, 1]),
        _chunk("x", "other user's hiking", [1, 0, 0], ns="user:2"),
        _chunk("u", "untagged note", [1, 0, 0], ns=None),
    ])
    hits = index.search([1, 0, 0], 2, namespace="user:1")
    assert [h.chunk.id for h in hits] == ["a", "b"]
    assert hits[0].score == pytest.approx(1.0) and hits[1].score == pytest.approx(0.6)
    assert hits[0].chunk.text == "hiking in the alps" and hits[0].chunk.metadata == {"namespace": "user:1"}
    assert {h.chunk.id for h in index.search([1, 0, 0], 9, namespace="user:1", include_untagged=True)} == {
        "a", "b", "c", "u"
    }
    assert {h.chunk.id for h in index.search([1, 0, 0], 9)} == {"a", "b", "c", "x", "u"}
    restarted = _reopen(facts)
    assert restarted.dimension == 3
    assert [h.chunk.id for h in restarted.search([0, 1, 0], 1, namespace="user:1")] == ["b"]
    assert restarted.ids("user:1") == {"a", "b", "c"} and restarted.count() == 5
    assert [c.id for c in restarted.get(["c", "missing", "a"])] == ["c", "a"]
    assert [c.id for c in restarted.chunks("user:2")] == ["x"]
    restarted.store.close()


def test_another_process_s_writes_replacements_and_deletes_are_seen(facts: PostgresFactStore) -> None:
    reader, writer = facts.vector_store(), _reopen(facts)
    writer.add([_chunk("a", "one", [1, 0]), _chunk("b", "two", [0, 1])])
    assert [h.chunk.id for h in reader.search([1, 0], 1, namespace="user:1")] == ["a"]  # cached now
    writer.add([_chunk("c", "three", [1, 0.01])])  # an append: read incrementally
    assert {h.chunk.id for h in reader.search([1, 0], 2, namespace="user:1")} == {"a", "c"}
    writer.add([_chunk("a", "one, changed", [0, 1])])  # a replacement in place
    scores = {h.chunk.id: h.score for h in reader.search([0, 1], 3, namespace="user:1")}
    assert scores["a"] == pytest.approx(1.0) and scores["c"] == pytest.approx(0.01, abs=1e-3)
    assert reader.get(["a"])[0].text == "one, changed"
    assert writer.delete(["c"]) == 1  # a removal: the namespace is reloaded
    assert "c" not in {h.chunk.id for h in reader.search([1, 0], 5, namespace="user:1")}
    writer.add([_chunk("b", "two, moved", [1, 0], ns="user:2")])  # moved: gone from user:1
    assert [h.chunk.id for h in reader.search([1, 0], 5, namespace="user:1")] == ["a"]
    assert [h.chunk.id for h in reader.search([1, 0], 5, namespace="user:2")] == ["b"]
    writer.delete_namespace("user:1")
    assert reader.search([1, 0], 5, namespace="user:1") == []
    writer.add([_chunk("z", "a new start", [1, 0])])  # the namespace again, a new epoch
    assert [h.chunk.id for h in reader.search([1, 0], 5, namespace="user:1")] == ["z"]
    writer.store.close()


def test_concurrent_writers_lose_nothing_a_cached_reader_sees(facts: PostgresFactStore) -> None:
    reader = facts.vector_store()
    reader.add([_chunk("seed", "seed", [1, 0, 0])])
    reader.search([1, 0, 0], 1, namespace="user:1")  # the reader holds the matrix
    writers = [_reopen(facts) for _ in range(4)]
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for i in range(25):
                writers[n].add([_chunk(f"w{n}-{i}", f"text {n} {i}", [1, n, i])])
                reader.search([1, 0, 0], 1, namespace="user:1")  # refreshes mid-stream
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    found = {h.chunk.id for h in reader.search([1, 0, 0], 1000, namespace="user:1")}
    assert len(found) == 101 and found == reader.ids("user:1")
    for w in writers:
        w.store.close()


def test_keyword_search_ranks_matches_within_one_namespace(facts: PostgresFactStore) -> None:
    index = facts.vector_store()
    index.add([
        _chunk("dog", "My dog Rex loves the park; the dog barks at dogs", [1, 0]),
        _chunk("cat", "the cat sleeps all day", [0, 1]),
        _chunk("park", "we walked in the park", [1, 1]),
        _chunk("other", "another user's dog", [1, 0], ns="user:2"),
    ])
    found = index.keyword_search("Where does my dog play?", 5, namespace="user:1")
    assert [cid for cid, _ in found] == ["dog"]
    both = index.keyword_search("dogs in the park", 5, namespace="user:1")
    assert [cid for cid, _ in both] == ["dog", "park"] and both[0][1] > both[1][1] > 0
    assert index.keyword_search("the and of", 5, namespace="user:1") == []  # stop words only
    assert index.keyword_search("dog", 5, namespace="user:3") == []
    assert [cid for cid, _ in _reopen(facts).keyword_search("cat", 5, namespace="user:1")] == ["cat"]


def test_delete_removes_vectors_postings_and_cached_embeddings(facts: PostgresFactStore) -> None:
    index = facts.vector_store()
    index.add([_chunk("a", "secret plan", [1, 0]), _chunk("b", "kept", [0, 1])])
    index.cache_embeddings("m@2", "user:1", {text_key("secret plan"): [1, 0], text_key("kept"): [0, 1]})
    assert index.delete(["a", "a", "missing"]) == 1
    assert _raw(facts, "SELECT id FROM {t}_vectors") == [("b",)]
    assert index.keyword_search("secret", 5, namespace="user:1") == []
    assert index.cached_embeddings("m@2", "user:1", [text_key("secret plan"), text_key("kept")]) == {
        text_key("kept"): [0.0, 1.0]
    }


def test_forgetting_a_namespace_leaves_no_row_of_it(facts: PostgresFactStore) -> None:
    index = facts.vector_store()
    index.add([_chunk("a", "alice likes tea", [1, 0]), _chunk("b", "bob", [0, 1], ns="user:2")])
    index.cache_embeddings("m@2", "user:1", {"k": [1, 0]})
    index.cache_embeddings("m@2", "user:2", {"k": [0, 1]})
    assert index.delete_namespace("user:1") == 1
    for table in ("{t}_vectors", "{t}_embeddings", "{t}_vector_ns"):
        assert _raw(facts, f"SELECT namespace FROM {table}") == [("user:2",)]
    assert index.keyword_search("tea", 5, namespace="user:1") == []
    assert index.delete_namespace("user:1") == 0
    assert index.cached_embeddings("m@2", "user:2", ["k"]) == {"k": [0.0, 1.0]}


def test_the_embedding_cache_is_per_identity_and_namespace(facts: PostgresFactStore) -> None:
    index = facts.vector_store()
    index.cache_embeddings("small@2", "user:1", {"k": [0.5, 0.25]})
    assert _reopen(facts).cached_embeddings("small@2", "user:1", ["k", "other"]) == {"k": [0.5, 0.25]}
    assert index.cached_embeddings("large@3", "user:1", ["k"]) == {}
    assert index.cached_embeddings("small@2", "user:2", ["k"]) == {}
    index.cache_embeddings("small@2", "user:1", {"k": [1.0, 2.0]})  # replaced, not duplicated
    assert index.cached_embeddings("small@2", "user:1", ["k"]) == {"k": [1.0, 2.0]}


def test_dimensions_never_mix(facts: PostgresFactStore) -> None:
    index = facts.vector_store()
    index.add([_chunk("a", "x", [1, 0, 0])])
    with pytest.raises(DimensionMismatchError, match="dimension 2 but the index has dimension 3"):
        index.add([_chunk("b", "y", [1, 0])])
    with pytest.raises(DimensionMismatchError, match="dimension 2 but the index has dimension 3"):
        index.search([1, 0], 1, namespace="user:1")
    with pytest.raises(DimensionMismatchError, match="has dimension 3, but dimension=4 was asked"):
        _reopen(facts, dimension=4).search([1, 0, 0, 0], 1, namespace="user:1")
    fresh = _reopen(facts)  # another process that has not read the dimension yet
    with pytest.raises(DimensionMismatchError, match="dimension 2 but the index has dimension 3"):
        fresh.add([_chunk("c", "z", [0, 1])])
    assert fresh.ids("user:1") == {"a"}


def test_a_small_cache_budget_still_answers_right(facts: PostgresFactStore) -> None:
    index = _reopen(facts, cache_bytes=0)
    index.add([_chunk("a", "x", [1, 0]), _chunk("b", "y", [0, 1], ns="user:2")])
    for _ in range(2):
        assert [h.chunk.id for h in index.search([1, 0], 1, namespace="user:1")] == ["a"]
        assert [h.chunk.id for h in index.search([1, 0], 1, namespace="user:2")] == ["b"]


def test_the_schema_version_is_recorded_and_a_newer_one_refused(facts: PostgresFactStore) -> None:
    facts.vector_store().ids("user:1")
    component = f"vectors:{facts.table}_vectors"
    assert _raw(facts, "SELECT version FROM fastaiagent_schema WHERE component = %s", component) == [(6,)]
    _raw(facts, "UPDATE fastaiagent_schema SET version = 9 WHERE component = %s RETURNING 1", component)
    with pytest.raises(SchemaVersionError, match=rf"'{component}' at schema version 9.*pip install -U"):
        _reopen(facts).ids("user:1")


def test_a_dropped_connection_is_retried_and_a_dead_server_is_unavailable(facts: PostgresFactStore) -> None:
    store = PostgresFactStore(facts.url, table=facts.table, min_pool_size=1, max_pool_size=1)
    index = PostgresVectorIndex(store)
    index.add([_chunk("a", "x", [1, 0])])
    with store.pool.connection() as conn:
        pid = conn.info.backend_pid
    _raw(facts, "SELECT pg_terminate_backend(%s)", pid)
    assert [h.chunk.id for h in index.search([1, 0], 1, namespace="user:1")] == ["a"]
    store.close()
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # closed when the block ends: nothing listens there
    dead = PostgresVectorIndex(PostgresFactStore(f"postgresql://postgres@127.0.0.1:{port}/test"))
    with pytest.raises(StoreUnavailableError, match="cannot connect to Postgres"):
        dead.search([1, 0], 1, namespace="user:1")


def test_bad_arguments_are_refused(facts: PostgresFactStore) -> None:
    from fastaiagent.errors import InvalidTypeError, InvalidValueError

    with pytest.raises(InvalidTypeError, match="needs a PostgresFactStore"):
        PostgresVectorIndex("postgresql://x")  # type: ignore[arg-type]
    index = facts.vector_store()
    with pytest.raises(InvalidTypeError, match="takes a list of ids"):
        index.delete("a")
    with pytest.raises(InvalidValueError, match="top_k"):
        index.search([1.0], -1, namespace="user:1")
    with pytest.raises(InvalidValueError, match="no vector"):
        index.add([Chunk("a", "x", None, {"namespace": "user:1"})])


def test_keyword_scores_are_bm25_on_the_namespaces_own_statistics(facts: PostgresFactStore) -> None:
    import random

    from fastaiagent.kb.bm25 import BM25Index

    rng = random.Random(3)
    words = ["lisbon", "jane", "sister", "dog", "park", "coffee", "plan", "trip", "moved", "sunny"]
    docs = {f"a{i}": " ".join(rng.choices(words, k=rng.randint(2, 9))) for i in range(120)}
    index = facts.vector_store()
    index.add([_chunk(cid, text, [1.0, 0.0]) for cid, text in docs.items()])
    reference = BM25Index()
    reference.add_many(docs.items())
    for query in ("Jane moved to Lisbon", "dog park", "sunny coffee trip plans"):
        expected = reference.search(query, 10)
        got = index.keyword_search(query, 10, namespace="user:1")
        assert [score for _, score in got] == pytest.approx([s for _, s in expected], rel=1e-6)
        last = expected[-1][1] + 1e-9  # ties at the cut may fall either way
        assert {c for c, v in got if v > last} == {c for c, v in expected if v > last}
    lisbon = index.keyword_search("Jane moved to Lisbon", 10, namespace="user:1")
    # Another user says "lisbon" five hundred times: user 1's scores stay put.
    index.add([_chunk(f"b{i}", "lisbon lisbon trip", [0.0, 1.0], ns="user:2") for i in range(500)])
    assert index.keyword_search("Jane moved to Lisbon", 10, namespace="user:1") == lisbon
    index.delete(["a0", "a1"])
    for cid in ("a0", "a1"):
        reference.remove(cid)
    after = _reopen(facts).keyword_search("dog park", 10, namespace="user:1")
    assert [score for _, score in after] == pytest.approx([s for _, s in reference.search("dog park", 10)], rel=1e-6)


def test_a_version_1_vector_table_gains_keyword_statistics(facts: PostgresFactStore) -> None:
    index = facts.vector_store()
    index.add([_chunk("a1", "Jane moved to Lisbon", [1, 0]), _chunk("a2", "Lisbon is sunny", [0, 1])])
    expected = index.keyword_search("Jane Lisbon", 5, namespace="user:1")
    t = f'"{facts.table}_vectors"'
    # Back to the layout of version 1: no token counts, no statistics, no trigger.
    component = f"vectors:{facts.table}_vectors"
    with psycopg.connect(facts.url, autocommit=True) as conn:
        conn.execute(f'DROP TRIGGER "{facts.table}_vectors_kw_stats" ON {t}')
        conn.execute(f"ALTER TABLE {t} DROP COLUMN ntokens")
        conn.execute(f'ALTER TABLE "{facts.table}_vector_ns" DROP COLUMN docs, DROP COLUMN tokens')
        conn.execute("UPDATE fastaiagent_schema SET version = 1 WHERE component = %s", (component,))
    reopened = _reopen(facts)
    assert reopened.keyword_search("Jane Lisbon", 5, namespace="user:1") == expected
    stats = _raw(facts, f'SELECT namespace, docs, tokens FROM "{facts.table}_vector_ns"')
    assert stats == [("user:1", 2, 5)]  # "to" and "is" are stop words
    assert _raw(facts, "SELECT version FROM fastaiagent_schema WHERE component = %s", component) == [(6,)]


def test_a_version_2_vector_table_gains_the_time_index(facts: PostgresFactStore) -> None:
    index = facts.vector_store()
    index.add([_chunk("a1", "early", [1, 0]), _chunk("a2", "late", [0, 1])])
    index.add([Chunk("a3", "dated", [1, 1], {"namespace": "user:1", "created_at": 50.0})])
    component = f"vectors:{facts.table}_vectors"
    with psycopg.connect(facts.url, autocommit=True) as conn:  # back to the layout of version 2
        conn.execute(f'DROP INDEX "idx_{facts.table}_vectors_recorded"')
        conn.execute("UPDATE fastaiagent_schema SET version = 2 WHERE component = %s", (component,))
    reopened = _reopen(facts)
    hits = reopened.search_recorded([1, 0], 5, namespace="user:1", spans=[(0.0, 100.0)])
    assert [hit.chunk.id for hit in hits] == ["a3"]
    indexes = _raw(facts, "SELECT indexname FROM pg_indexes WHERE tablename = %s", f"{facts.table}_vectors")
    assert (f"idx_{facts.table}_vectors_recorded",) in indexes
    assert _raw(facts, "SELECT version FROM fastaiagent_schema WHERE component = %s", component) == [(6,)]


def test_a_version_3_vector_table_has_its_chinese_rows_tokenized_again(facts: PostgresFactStore) -> None:
    index = facts.vector_store()
    index.add([
        _chunk("zh", "伴娘请了我室友", [1, 0]),
        _chunk("en", "the bridesmaid invited my roommate", [0, 1]),
        Chunk("ctx", "好的", [1, 1], {"namespace": "user:1", "context": "伴娘是谁"}),
    ])  # fmt: skip
    component = f"vectors:{facts.table}_vectors"
    t = f'"{facts.table}_vectors"'
    with psycopg.connect(facts.url, autocommit=True) as conn:  # back to version 3's tokens
        conn.execute(f"UPDATE {t} SET tsv = to_tsvector('simple', text || ' n' || md5(namespace)) WHERE id = 'zh'")
        conn.execute("UPDATE fastaiagent_schema SET version = 3 WHERE component = %s", (component,))
    before = _raw(facts, f"SELECT tsv::text FROM {t} WHERE id = 'en'")
    reopened = _reopen(facts)
    assert [i for i, _ in reopened.keyword_search("伴娘是谁", 5, namespace="user:1")] == ["ctx", "zh"]
    assert _raw(facts, f"SELECT tsv::text FROM {t} WHERE id = 'en'") == before  # other scripts: untouched
    assert _raw(facts, "SELECT version FROM fastaiagent_schema WHERE component = %s", component) == [(6,)]


def test_a_version_5_vector_table_is_stemmed_again(facts: PostgresFactStore) -> None:
    index = facts.vector_store()
    index.add([_chunk("moved", "we moved to uv", [1, 0]), _chunk("plain", "tomatoes on the balcony", [0, 1])])
    component = f"vectors:{facts.table}_vectors"
    t = f'"{facts.table}_vectors"'
    with psycopg.connect(facts.url, autocommit=True) as conn:  # back to version 5's unstemmed "moved"
        conn.execute(f"UPDATE {t} SET tsv = to_tsvector('simple', 'moved uv n' || md5(namespace)) WHERE id = 'moved'")
        conn.execute("UPDATE fastaiagent_schema SET version = 5 WHERE component = %s", (component,))
    assert index.keyword_search("moving", 5, namespace="user:1") == []
    before = _raw(facts, f"SELECT xmin::text FROM {t} WHERE id = 'plain'")
    reopened = _reopen(facts)
    assert [i for i, _ in reopened.keyword_search("moving", 5, namespace="user:1")] == ["moved"]
    assert _raw(facts, f"SELECT xmin::text FROM {t} WHERE id = 'plain'") == before  # same tokens: not written
    terms = _raw(facts, f'SELECT term, df FROM "{facts.table}_vector_terms" WHERE namespace = %s', "user:1")
    assert ("move", 1) in terms and all(term != "moved" for term, _ in terms)  # counted again
    reopened.add([_chunk("again", "moving again", [1, 1])])  # the count triggers are back on
    df = _raw(facts, f'SELECT df FROM "{facts.table}_vector_terms" WHERE namespace = %s AND term = %s', "user:1", "move")
    assert df == [(2,)]
    assert {i for i, _ in reopened.keyword_search("moved", 5, namespace="user:1")} == {"moved", "again"}
    assert _raw(facts, "SELECT version FROM fastaiagent_schema WHERE component = %s", component) == [(6,)]


def test_term_counts_follow_every_write_and_a_forgotten_word_leaves(facts: PostgresFactStore) -> None:
    index = facts.vector_store()
    index.add([_chunk("a", "zanzibar trip", [1, 0]), _chunk("b", "trip planning", [0, 1])])
    index.add([_chunk("c", "zanzibar beach", [1, 1], ns="user:2")])
    terms = f'"{facts.table}_vector_terms"'

    def counts(ns: str) -> dict[str, int]:
        rows = _raw(facts, f"SELECT term, df FROM {terms} WHERE namespace = %s AND term NOT LIKE 'n%%'", ns)
        return dict(rows)

    assert counts("user:1") == {"zanzibar": 1, "trip": 2, "plan": 1}
    index.delete(["a"])
    assert counts("user:1") == {"trip": 1, "plan": 1}  # no row of a word nobody holds
    index.add([_chunk("b", "zanzibar", [0, 1])])  # rewritten: its old words counted down
    assert counts("user:1") == {"zanzibar": 1}
    index.delete_namespace("user:1")
    assert counts("user:1") == {} and counts("user:2") == {"zanzibar": 1, "beach": 1}


def test_a_version_4_vector_table_gains_term_counts(facts: PostgresFactStore) -> None:
    index = facts.vector_store()
    index.add([_chunk("a1", "Jane moved to Lisbon", [1, 0]), _chunk("a2", "Lisbon is sunny", [0, 1])])
    component = f"vectors:{facts.table}_vectors"
    with psycopg.connect(facts.url, autocommit=True) as conn:  # back to the layout of version 4
        conn.execute(f'DROP TRIGGER "{facts.table}_vectors_kw_terms" ON "{facts.table}_vectors"')
        conn.execute(f'DROP TABLE "{facts.table}_vector_terms"')
        conn.execute("UPDATE fastaiagent_schema SET version = 4 WHERE component = %s", (component,))
    reopened = _reopen(facts)
    assert [i for i, _ in reopened.keyword_search("Lisbon sunny", 5, namespace="user:1")] == ["a2", "a1"]
    rows = _raw(facts, f'SELECT term, df FROM "{facts.table}_vector_terms" WHERE term = %s', "lisbon")
    assert rows == [("lisbon", 2)]
    assert _raw(facts, "SELECT version FROM fastaiagent_schema WHERE component = %s", component) == [(6,)]
