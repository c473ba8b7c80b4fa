"""The ItemStore capability (facts/items.py) behaves the same on SQLite, Postgres
and Redis: what the LangGraph and Agents SDK adapters rely on."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from _wait import wait_until
from fastaiagent.errors import InvalidTypeError, InvalidValueError, SchemaVersionError
from fastaiagent.facts.items import HoldsItems, ItemStore, ItemWrite


@pytest.fixture
def items(fact_store: Any) -> ItemStore:
    assert isinstance(fact_store, HoldsItems)
    store = fact_store.item_store()
    assert isinstance(store, ItemStore)
    return store


def put(items: ItemStore, ns: tuple[str, ...], key: str, value: str, **kw: Any) -> bool:
    return items.write([ItemWrite(ns, key, value, **kw)])[0]


def test_put_get_overwrite_delete(items: ItemStore) -> None:
    assert put(items, ("a", "b"), "k", "v1")
    first = items.get(("a", "b"), ["k"])[0]
    assert first is not None and first.value == "v1" and first.namespace == ("a", "b")
    put(items, ("a", "b"), "k", "v2")
    second = items.get(("a", "b"), ["k", "missing"])
    assert second[0] is not None and second[0].value == "v2" and second[1] is None
    assert second[0].created_at == first.created_at and second[0].updated_at >= first.updated_at
    assert items.write([ItemWrite(("a", "b"), "k", None)]) == [True]
    assert items.write([ItemWrite(("a", "b"), "k", None)]) == [False]
    assert items.get(("a", "b"), ["k"]) == [None]


def test_if_absent_keeps_the_first_value(items: ItemStore) -> None:
    ns = ("w",)
    assert items.write([ItemWrite(ns, "k", "first", if_absent=True)]) == [True]
    assert items.write([ItemWrite(ns, "k", "second", if_absent=True)]) == [False]
    assert items.get(ns, ["k"])[0].value == "first"  # type: ignore[union-attr]


def test_if_value_swaps_only_the_value_read(items: ItemStore) -> None:
    ns = ("cas",)
    put(items, ns, "k", "v1")
    assert items.write([ItemWrite(ns, "k", "v2", if_value="v0")]) == [False]  # not what is held
    assert items.write([ItemWrite(ns, "k", "v2", if_value="v1")]) == [True]
    assert items.write([ItemWrite(ns, "k", "v3", if_value="v1")]) == [False]  # another came first
    assert items.get(ns, ["k"])[0].value == "v2"  # type: ignore[union-attr]
    assert items.write([ItemWrite(ns, "k", None, if_value="v1")]) == [False]
    assert items.write([ItemWrite(ns, "k", None, if_value="v2")]) == [True]
    assert items.write([ItemWrite(ns, "k", "v4", if_value="v2")]) == [False]  # gone: nothing to swap
    assert items.get(ns, ["k"]) == [None]
    with pytest.raises(InvalidValueError, match="not both"):
        items.write([ItemWrite(ns, "k", "v", if_absent=True, if_value="v")])


def test_write_all_writes_the_whole_batch_or_nothing(items: ItemStore) -> None:
    ns, other = ("all", "u1"), ("all", "u2")
    assert items.write_all([ItemWrite(ns, "rev", "1", if_absent=True), ItemWrite(ns, "doc", "a")])
    stale = [ItemWrite(ns, "rev", "2", if_value="0"), ItemWrite(ns, "doc", "b"), ItemWrite(other, "m", "x")]
    assert not items.write_all(stale)  # the rev moved on: nothing of the batch is written
    assert [i.value for i in items.get(ns, ["rev", "doc"]) if i] == ["1", "a"]
    assert items.get(other, ["m"]) == [None]
    claimed = [ItemWrite(ns, "rev", "2", if_value="1"), ItemWrite(ns, "m:1", "x", if_absent=True)]
    assert items.write_all(claimed)
    again = [ItemWrite(ns, "rev", "3", if_value="2"), ItemWrite(ns, "m:1", "y", if_absent=True)]
    assert not items.write_all(again)  # a claimed key: the rev stays too
    assert [i.value for i in items.get(ns, ["rev", "m:1"]) if i] == ["2", "x"]
    assert items.write_all([]) and items.write_all([ItemWrite(ns, "doc", None, if_value="a")])
    assert items.get(ns, ["doc"]) == [None]


def test_write_all_lets_one_of_racing_writers_win_each_round(items: ItemStore) -> None:
    """Threads incrementing one counter by compare-and-set lose no increment."""
    import threading

    ns = ("race",)
    put(items, ns, "n", "0")

    def bump(times: int) -> None:
        for _ in range(times):
            while True:
                held = items.get(ns, ["n"])[0]
                assert held is not None
                if items.write_all([ItemWrite(ns, "n", str(int(held.value) + 1), if_value=held.value)]):
                    break

    threads = [threading.Thread(target=bump, args=(25,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert items.get(ns, ["n"])[0].value == "100"  # type: ignore[union-attr]


def test_scan_orders_pages_and_filters_by_key(items: ItemStore) -> None:
    ns = ("s", "t")
    items.write([ItemWrite(ns, f"k{i}", str(i)) for i in (3, 1, 2, 4)])
    assert [i.key for i in items.scan(ns, exact=True)] == ["k1", "k2", "k3", "k4"]
    assert [i.key for i in items.scan(ns, exact=True, descending=True, limit=2)] == ["k4", "k3"]
    assert [i.key for i in items.scan(ns, exact=True, limit=2, offset=1)] == ["k2", "k3"]
    assert [i.key for i in items.scan(ns, exact=True, before="k3", descending=True)] == ["k2", "k1"]
    assert items.scan(ns, exact=True, limit=0) == []


def test_prefixes_are_whole_parts(items: ItemStore) -> None:
    items.write(
        [
            ItemWrite(("u", "a"), "k", "1"),
            ItemWrite(("u", "a", "x"), "k", "2"),
            ItemWrite(("u", "ab"), "k", "3"),
            ItemWrite(("v",), "k", "4"),
        ]
    )
    assert [i.value for i in items.scan(("u", "a"))] == ["1", "2"]
    assert [i.value for i in items.scan(("u", "a"), exact=True)] == ["1"]
    assert items.namespaces(("u",)) == [("u", "a"), ("u", "a", "x"), ("u", "ab")]
    assert items.delete_prefix(("u", "a")) == 2
    assert items.namespaces() == [("u", "ab"), ("v",)]


def test_empty_parts_and_keys_are_items_too(items: ItemStore) -> None:
    put(items, ("t", ""), "", "root")
    assert items.get(("t", ""), [""])[0].value == "root"  # type: ignore[union-attr]
    assert items.namespaces(("t",)) == [("t", "")]


def test_expired_items_are_gone_and_refresh_extends(items: ItemStore) -> None:
    put(items, ("e",), "short", "x", ttl_seconds=0.05)
    put(items, ("e",), "kept", "y", ttl_seconds=60)
    put(items, ("e",), "forever", "z")
    kept = items.get(("e",), ["kept"])[0]
    assert kept is not None and kept.ttl_seconds == 60 and kept.expires_at is not None
    wait_until(lambda: items.get(("e",), ["short"]) == [None], "the short item to expire", timeout=5)
    assert [i.key for i in items.scan(("e",))] == ["forever", "kept"]
    refreshed = items.get(("e",), ["kept"], refresh_ttl=True)[0]
    assert refreshed is not None and refreshed.expires_at >= kept.expires_at  # type: ignore[operator]
    # An expired key can be written again, even if-absent, and counts as new.
    assert items.write([ItemWrite(("e",), "short", "again", if_absent=True)]) == [True]
    assert items.purge_expired() >= 0


def test_bad_arguments_name_the_problem(items: ItemStore) -> None:
    with pytest.raises(InvalidTypeError, match="tuple of str"):
        items.write([ItemWrite(["a"], "k", "v")])  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError, match="reserved character"):
        items.write([ItemWrite(("a\x1fb",), "k", "v")])
    with pytest.raises(InvalidValueError, match="ttl_seconds"):
        items.write([ItemWrite(("a",), "k", "v", ttl_seconds=0)])
    with pytest.raises(InvalidValueError, match="limit"):
        items.scan(("a",), limit=-1)


def test_sqlite_table_is_versioned(tmp_path: Path) -> None:
    from fastaiagent.facts.sqlite.store import SQLiteFactStore

    path = tmp_path / "v.db"
    store = SQLiteFactStore(path)
    put(store.item_store(), ("a",), "k", "v")
    with sqlite3.connect(path) as conn:
        row = conn.execute(
            "SELECT version FROM fastaiagent_schema WHERE component = 'items:namespaced_items'"
        ).fetchone()
        assert row == (1,)
        conn.execute(
            "UPDATE fastaiagent_schema SET version = 99 WHERE component = 'items:namespaced_items'"
        )
    store.close()
    with pytest.raises(SchemaVersionError, match="newer fastaiagent"):
        SQLiteFactStore(path).item_store().scan(("a",))


def test_redis_layout_is_versioned(redis_fact_store: Any) -> None:
    fact_store = redis_fact_store
    items = fact_store.item_store()
    put(items, ("a",), "k", "v")
    assert fact_store.client.get(items.prefix + "layout") == "1"
    fact_store.client.set(items.prefix + "layout", "9")
    with pytest.raises(SchemaVersionError, match="newer fastaiagent"):
        fact_store.item_store().scan(("a",))


def test_postgres_table_is_versioned(postgres_fact_store: Any) -> None:
    fact_store = postgres_fact_store
    items = fact_store.item_store()
    put(items, ("a",), "k", "v")
    component = f"items:{items.table}"
    with fact_store.pool.connection() as conn:
        found = conn.execute(
            "SELECT version FROM fastaiagent_schema WHERE component = %s", (component,)
        ).fetchone()
        assert found == (1,)
        conn.execute(
            "UPDATE fastaiagent_schema SET version = 99 WHERE component = %s", (component,)
        )
    try:
        with pytest.raises(SchemaVersionError, match="newer fastaiagent"):
            fact_store.item_store().scan(("a",))
    finally:
        with fact_store.pool.connection() as conn:
            conn.execute("DELETE FROM fastaiagent_schema WHERE component = %s", (component,))
