"""make_fact_store: location strings, store instances, wrong types, missing drivers."""

from __future__ import annotations

import sys

import pytest

from fastaiagent.errors import NotFoundError
from fastaiagent.learn import Fact, FactStore, MemoryStore, make_fact_store


def test_sqlite_is_the_default_and_creates_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FASTAIAGENT_LOCAL_DB")
    store = make_fact_store()
    assert isinstance(store, MemoryStore)
    assert list(tmp_path.iterdir()) == []  # constructing touches no file


def test_sqlite_url_with_four_slashes_is_absolute(tmp_path, monkeypatch) -> None:
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    store = make_fact_store(f"sqlite:///{tmp_path / 'x.db'}")  # "sqlite:///" + "/tmp/..."
    assert isinstance(store, MemoryStore)
    store.add(Fact("hi", scope="user", scope_id="u"))
    assert store.path == (tmp_path / "x.db").resolve() and (tmp_path / "x.db").exists()
    assert list(elsewhere.iterdir()) == []
    store.close()


def test_sqlite_url_with_three_slashes_is_relative(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    store = make_fact_store("sqlite:///data/facts.db")
    store.add(Fact("hi", scope="user", scope_id="u"))
    assert store.path == (tmp_path / "data" / "facts.db").resolve()  # type: ignore[attr-defined]
    store.close()


def test_sqlite_url_whose_folder_is_missing_names_the_folder(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = make_fact_store("sqlite:///tmp/x/x.db")  # relative: ./tmp/x, which does not exist
    with pytest.raises(NotFoundError, match=r"folder '.*/tmp/x' .* does not exist: create it"):
        store.add(Fact("hi", scope="user", scope_id="u"))
    with pytest.raises(ValueError, match="mkdir -p"):
        store.list_active("user", "u")
    assert list(tmp_path.iterdir()) == []  # nothing created behind the user's back
    store.close()


@pytest.mark.parametrize("url", ["sqlite:///", "sqlite:////", "sqlite:///data/"])
def test_sqlite_url_without_a_file_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match=r"names no database file: use 'sqlite:///relative"):
        make_fact_store(url)


def test_in_memory_sqlite_url_is_refused() -> None:
    with pytest.raises(ValueError, match="'sqlite:///:memory:' is not supported"):
        make_fact_store("sqlite:///:memory:")


@pytest.mark.parametrize(
    ("url", "cls"),
    [
        ("postgres://u@127.0.0.1:5432/db", "PostgresFactStore"),
        ("postgresql://u@127.0.0.1:5432/db", "PostgresFactStore"),
        ("redis://127.0.0.1:6379/0", "RedisFactStore"),
        ("rediss://127.0.0.1:6380/0", "RedisFactStore"),
    ],
)
def test_server_urls_select_their_store_without_connecting(url: str, cls: str) -> None:
    store = make_fact_store(url)  # lazy: no server needed to construct
    assert type(store).__name__ == cls
    assert isinstance(store, FactStore)
    store.close()


def test_a_store_instance_is_used_as_is(tmp_path) -> None:
    store = MemoryStore(tmp_path / "mine.db")
    assert make_fact_store(store) is store


class _DuckStore:
    """Any object with the FactStore methods is accepted (structural typing)."""

    def add(self, fact): ...  # type: ignore[no-untyped-def]
    def get(self, fact_id): ...  # type: ignore[no-untyped-def]
    def list_active(self, scope, scope_id, project_id="", limit=50, offset=0, *, now=None, include_expired=False): ...  # type: ignore[no-untyped-def]
    def list_as_of(self, scope, scope_id, project_id, at, limit=50, offset=0): ...  # type: ignore[no-untyped-def]
    def replaced(self, fact_id): ...  # type: ignore[no-untyped-def]
    def expire(self, scope, scope_id, project_id, fact_id, at): ...  # type: ignore[no-untyped-def]
    def prune_history(self, before, *, project_id=None, limit=500): ...  # type: ignore[no-untyped-def]
    def supersede(self, old_id, new_id, *, at=None): ...  # type: ignore[no-untyped-def]
    def update(self, new, old_id): ...  # type: ignore[no-untyped-def]
    def delete(self, scope, scope_id, project_id="", *, fact=None, fact_id=None): ...  # type: ignore[no-untyped-def]
    def prune_learned(self, scope, scope_id, project_id="", *, keep): ...  # type: ignore[no-untyped-def]
    def browse(self, **kw): ...  # type: ignore[no-untyped-def]
    def subjects(self, *, include_superseded=False): ...  # type: ignore[no-untyped-def]
    def close(self): ...  # type: ignore[no-untyped-def]
    def find_active(self, scope, scope_id, project_id, text): ...  # type: ignore[no-untyped-def]


def test_a_users_own_store_is_used_as_is() -> None:
    duck = _DuckStore()
    assert make_fact_store(duck) is duck


def test_an_incomplete_store_is_told_what_it_lacks() -> None:
    class OlderStore(_DuckStore):
        find_active = None  # written before find_active joined the protocol

    with pytest.raises(TypeError, match="OlderStore is not a complete FactStore: it lacks find_active"):
        make_fact_store(OlderStore())


@pytest.mark.parametrize("location", ["mysql://x", "", "postgres:/x", "redis:/x", "SQLITE"])
def test_unknown_strings_are_value_errors(location: str) -> None:
    with pytest.raises(ValueError, match="unsupported location"):
        make_fact_store(location)


@pytest.mark.parametrize("location", [None, 42, b"sqlite", object(), ["sqlite"]])
def test_non_string_non_store_is_a_type_error(location: object) -> None:
    with pytest.raises(TypeError, match="location must be a string or a FactStore instance, got"):
        make_fact_store(location)


@pytest.mark.parametrize(
    ("url", "driver", "modules", "extra"),
    [
        ("postgres://u@h/db", "psycopg", ["fastaiagent.facts.postgres.store"], "postgres"),
        ("postgresql://u@h/db", "psycopg_pool", ["fastaiagent.facts.postgres.store"], "postgres"),
        (
            "redis://h:6379/0",
            "redis",
            ["fastaiagent.facts.redis.store", "fastaiagent.facts.redis.client"],
            "redis",
        ),
    ],
)
def test_missing_driver_names_the_extra(monkeypatch, url, driver, modules, extra) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(sys.modules, driver, None)  # as if not installed
    for module in modules:  # imported fresh, as in a process without the driver
        monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError, match=rf"pip install 'fastaiagent\[{extra}\]'"):
        make_fact_store(url)


def test_a_postgres_url_names_its_table_and_the_driver_never_sees_the_option() -> None:
    pytest.importorskip("psycopg")
    store = make_fact_store("postgresql://u@127.0.0.1:1/db?sslmode=disable&table=support_memory")
    assert store.table == "support_memory"  # type: ignore[attr-defined]
    assert store.url == "postgresql://u@127.0.0.1:1/db?sslmode=disable"  # type: ignore[attr-defined]
    assert make_fact_store("postgresql://u@127.0.0.1:1/db").table == "learned_memory"  # type: ignore[attr-defined]


def test_a_redis_url_names_its_key_prefix() -> None:
    pytest.importorskip("redis")
    store = make_fact_store("redis://127.0.0.1:1/0?prefix=support&socket_timeout=2")
    assert store.prefix == "support"  # type: ignore[attr-defined]
    assert store.url == "redis://127.0.0.1:1/0?socket_timeout=2"  # type: ignore[attr-defined]
    assert make_fact_store("redis://127.0.0.1:1/0").prefix == "fastaiagent"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "location",
    [
        "postgresql://u@h/db?table=",
        "postgresql://u@h/db?table=a&table=b",
        "postgresql://u@h/db?table=bad;drop",
        "redis://h:1/0?prefix=",
    ],
)
def test_a_bad_table_or_prefix_option_is_a_clear_value_error(location: str) -> None:
    pytest.importorskip("psycopg")
    pytest.importorskip("redis")
    with pytest.raises(ValueError, match=r"table|prefix"):
        make_fact_store(location)
