"""``store.destroy()`` tears a tenant down: everything its store made goes, on SQLite,
Postgres, Redis and a Redis Cluster (facts, windows, items, vector indexes of
every size with their keyword postings and cached embeddings, schema or layout
versions), and nothing of a neighbour store's does, even one whose table or
prefix starts with the same letters. The store is usable again afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from _env import unique_name
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.items import ItemWrite
from fastaiagent.facts.windows import WindowKey
from fastaiagent.kb.protocols import NAMESPACE_KEY, Chunk

ALICE = WindowKey("agent", "", "alice")
SIZES = (8, 16)  # the default index takes the first size, the second goes beside it


def fill(store: Any) -> None:
    """Write through every part of a store: facts (one superseded), a window, an
    item, vectors of two sizes with their keyword postings and cached embeddings."""
    old = store.add(Fact("Lives in Bergen", scope="user", scope_id="alice"))
    store.update(Fact("Lives in Oslo", scope="user", scope_id="alice"), old)
    assert store.window_store().save(ALICE, '{"turns": 1}', None, None)
    store.item_store().write([ItemWrite(("prefs", "alice"), "tea", '"green"')])
    for size in SIZES:
        index = store.vector_store(size)
        chunk = Chunk("m1", "Biscuit the dog likes tea", [1.0] * size, {NAMESPACE_KEY: "user:alice"})
        index.add([chunk])
        index.cache_embeddings("model-x", "user:alice", {"key": [0.5] * size})
    assert store.vector_dimensions() == list(SIZES)


def holds_everything(store: Any) -> bool:
    """What :func:`fill` wrote is all there."""
    facts = [f.fact for f in store.list_active("user", "alice")]
    window = store.window_store().load(ALICE)
    item = store.item_store().get(("prefs", "alice"), ["tea"])[0]
    vectors = all(store.vector_store(size).ids("user:alice") == {"m1"} for size in SIZES)
    return facts == ["Lives in Oslo"] and window is not None and item is not None and vectors


def holds_nothing(store: Any) -> bool:
    """A store that starts afresh: no fact, window, item or vector of any size."""
    return (
        store.list_active("user", "alice") == []
        and store.browse(scope_id="alice", include_superseded=True) == []
        and store.window_store().load(ALICE) is None
        and store.item_store().get(("prefs", "alice"), ["tea"]) == [None]
        and store.vector_dimensions() == []
        and store.vector_store().ids("user:alice") == set()
    )


def check_destroy(
    store: Any, neighbours: list[Any], leftovers: Callable[[], list[str]], made: int | None = None
) -> None:
    """Fill ``store`` and its neighbours, destroy ``store``: ``leftovers()`` (its
    tables or keys still there) is empty, the neighbours hold all they did, and
    ``store`` works again from nothing. ``destroy()`` returns ``made`` (None: as
    many as ``leftovers()`` listed)."""
    for each in [store, *neighbours]:
        fill(each)
    before = leftovers()
    assert before
    made = len(before) if made is None else made
    assert store.destroy() == made
    assert leftovers() == []
    assert all(holds_everything(n) for n in neighbours)
    assert holds_nothing(store)
    fill(store)  # usable again: it makes its tables (or layout) anew
    assert holds_everything(store)
    assert store.destroy() == made
    assert store.destroy() == 0  # nothing left to drop
    assert leftovers() == []


# -- SQLite --------------------------------------------------------------------


def test_sqlite_destroy_drops_the_stores_tables_and_leaves_the_rest_of_the_file(
    tmp_path: Path,
) -> None:
    import sqlite3

    from fastaiagent.facts.sqlite.store import SQLiteFactStore
    from fastaiagent.trace.store import TraceStore

    path = tmp_path / "tenant.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE app_orders (id INTEGER PRIMARY KEY)")  # the user's own
    assert TraceStore(path).count_runs() == 0  # the trace store's tables, in the same file
    store, neighbour = SQLiteFactStore(path), SQLiteFactStore(tmp_path / "other.db")

    def tables() -> set[str]:
        with sqlite3.connect(path) as conn:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return {row[0] for row in rows if not row[0].startswith("sqlite_")}

    before = tables()

    def leftovers() -> list[str]:
        return sorted(tables() - before)

    # the fact table, windows, items and per size 9 tables (4 of them FTS5's own)
    check_destroy(store, [neighbour], leftovers, made=3 + 2 * 9)
    assert tables() == before  # the user's table and the traces' stay
    with sqlite3.connect(path) as conn:
        versions = [row[0] for row in conn.execute("SELECT component FROM fastaiagent_schema")]
    assert versions == ["traces"]


def test_sqlite_destroy_of_a_missing_file_makes_no_file(tmp_path: Path) -> None:
    from fastaiagent.facts.sqlite.store import SQLiteFactStore

    assert SQLiteFactStore(tmp_path / "never.db").destroy() == 0
    assert not (tmp_path / "never.db").exists()


# -- Postgres --------------------------------------------------------------------


def _postgres_objects(url: str, name: str) -> list[str]:
    """Every relation (table, index, sequence), function and schema-version row
    whose name holds ``name``."""
    import psycopg

    like = "%" + name.replace("_", r"\_") + "%"
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT 'relation ' || relname FROM pg_class WHERE relname LIKE %s "
            "UNION ALL SELECT 'function ' || proname FROM pg_proc WHERE proname LIKE %s",
            (like, like),
        ).fetchall()
        if conn.execute("SELECT to_regclass('fastaiagent_schema')").fetchone()[0]:  # type: ignore[index]
            found += conn.execute(
                "SELECT 'version ' || component FROM fastaiagent_schema WHERE component LIKE %s",
                (like,),
            ).fetchall()
    return sorted(row[0] for row in found)


@pytest.fixture
def pg_stores(postgres_url: str) -> Iterator[Callable[[str], Any]]:
    """open(name) -> a PostgresFactStore on table ``name``, destroyed afterwards."""
    from fastaiagent.facts.postgres.store import PostgresFactStore

    opened: list[Any] = []

    def open_store(name: str) -> Any:
        opened.append(PostgresFactStore(postgres_url, table=name))
        return opened[-1]

    yield open_store
    for store in opened:
        store.destroy()
        store.close()


@pytest.mark.postgres
def test_postgres_destroy_drops_the_table_family_of_every_size(
    postgres_url: str, pg_stores: Callable[[str], Any]
) -> None:
    name = unique_name("destroy")
    store = pg_stores(name)
    # Neighbours whose names start with this store's: a longer name, and names
    # a vector table of this store's could be taken for.
    neighbours = [pg_stores(name + "x"), pg_stores(name + "_other"), pg_stores(name + "_vectorsx")]

    def leftovers() -> list[str]:  # what holds this store's name and no neighbour's
        return [
            found
            for found in _postgres_objects(postgres_url, name)
            if not any(n.table in found for n in neighbours)
        ]

    # the fact table, windows, items, and per size 5 vector tables
    check_destroy(store, neighbours, leftovers, made=3 + 2 * 5)


@pytest.mark.postgres
def test_postgres_destroy_leaves_what_another_owner_built_on_a_table_and_says_so(
    postgres_url: str, pg_stores: Callable[[str], Any]
) -> None:
    import psycopg

    from fastaiagent.errors import UsageError

    name = unique_name("destroy")
    store = pg_stores(name)
    fill(store)
    view = name + "_report"  # a user's view over the facts: not the store's to drop
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE VIEW {view} AS SELECT fact FROM {name}")
    try:
        with pytest.raises(UsageError, match=f"depend on a table.*{view}.*drop them"):
            store.destroy()
        assert holds_everything(store)  # one transaction: nothing went
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP VIEW {view}")
    assert store.destroy() == 3 + 2 * 5


@pytest.mark.postgres
def test_postgres_destroy_through_a_transaction_pooler(
    postgres_url: str, pgbouncer_url: str
) -> None:
    from fastaiagent.facts.postgres.store import PostgresFactStore

    name = unique_name("destroy")
    store = PostgresFactStore(pgbouncer_url, table=name, pooler="transaction", max_pool_size=2)
    try:
        check_destroy(store, [], lambda: _postgres_objects(postgres_url, name), made=3 + 2 * 5)
    finally:
        store.destroy()
        store.close()


# -- Redis ---------------------------------------------------------------------


def _keys(client: Any, prefix: str) -> list[str]:
    """Every key ``<prefix>:*`` (on every primary of a cluster)."""
    return sorted(set(client.scan_iter(match=prefix + ":*", count=1000)))


@pytest.fixture
def redis_stores() -> Iterator[Callable[[str, str], Any]]:
    """open(url, prefix) -> a RedisFactStore, destroyed afterwards."""
    from fastaiagent.facts.redis.store import RedisFactStore

    opened: list[Any] = []

    def open_store(url: str, prefix: str) -> Any:
        opened.append(RedisFactStore(url, prefix=prefix))
        return opened[-1]

    yield open_store
    for store in opened:
        store.destroy()
        store.close()


@pytest.mark.redis
def test_redis_destroy_deletes_every_key_under_the_prefix(
    redis_url: str, redis_stores: Callable[[str, str], Any]
) -> None:
    name = unique_name("destroy")
    store = redis_stores(redis_url, name)
    neighbours = [redis_stores(redis_url, name + "x"), redis_stores(redis_url, name + "vec")]
    check_destroy(store, neighbours, lambda: _keys(store.client, name))


@pytest.mark.redis
@pytest.mark.subprocess
def test_redis_cluster_destroy_deletes_the_prefix_on_every_node(
    redis_cluster: Any, redis_stores: Callable[[str, str], Any]
) -> None:
    name = unique_name("destroy")
    store = redis_stores(redis_cluster.url, name)
    neighbour = redis_stores(redis_cluster.url, name + "x")
    check_destroy(store, [neighbour], lambda: _keys(store.client, store.prefix))
