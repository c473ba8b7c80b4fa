"""Export, import and copy of memory on every backend (SQLite, Postgres, Redis):
what a user moving between stores, or downloading their data, relies on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from _memory_sample import EMBEDDER, fill, lines, vector
from fastaiagent.facts import Fact
from fastaiagent.facts.factory import make_fact_store
from fastaiagent.facts.transfer import copy_memory, export_memory, import_memory
from fastaiagent.facts.windows import WindowKey

BACKENDS = [
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("redis", marks=pytest.mark.redis),
]


@pytest.fixture
def store_at(own_location: Any) -> Any:
    opened: list[Any] = []

    def make(backend: str) -> tuple[str, Any]:
        location = own_location(backend)
        opened.append(make_fact_store(location))
        return location, opened[-1]

    yield make
    for store in opened:
        store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_export_import_export_gives_the_same_file(backend: str, store_at: Any, tmp_path: Path) -> None:
    _, source = store_at(backend)
    fill(source)
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    counts = export_memory(source, first)
    assert (counts.facts, counts.recall, counts.windows, counts.items) == (7, 10, 3, 3)
    _, target = store_at(backend)  # an empty location of the same kind
    assert import_memory(target, first, everything=True).facts == 7
    export_memory(target, second)
    assert lines(second) == lines(first)


@pytest.mark.parametrize("target_backend", BACKENDS)
def test_a_copy_keeps_history_validity_vectors_windows_and_items(store_at: Any, target_backend: str) -> None:
    source_location, source = store_at("sqlite")
    ids = fill(source)
    target_location, target = store_at(target_backend)
    counts = copy_memory(source_location, target_location)
    assert (counts.facts, counts.recall, counts.windows, counts.items, counts.kept) == (7, 10, 3, 3, 0)

    active = target.list_active("user", "ann")
    assert [f.fact for f in active] == ["likes tea"]  # passport expired at T0 + 10
    tea = active[0]
    coffee = target.replaced(tea.id)
    assert [f.fact for f in coffee] == ["likes coffee"]
    assert [f.fact for f in target.replaced(coffee[0].id)] == ["likes tea"]
    assert coffee[0].superseded_at == source.get(ids["coffee"]).superseded_at
    expired = target.list_active("user", "ann", include_expired=True, now=0)
    passport = next(f for f in expired if f.fact == "passport expires soon")
    assert (passport.valid_from, passport.valid_to) == (1_700_000_000.0, 1_700_000_010.0)
    acme = target.list_active("user", "ann", "acme")[0]
    assert (acme.confidence, acme.source, acme.metadata) == (0.7, "conversation", {"agent_id": "a1", "n": [1, 2]})
    assert [f.fact for f in target.list_active("agent", "")] == ["answer briefly"]

    vectors = target.vector_store()
    hit = vectors.search(vector("user:ann3"), 1, namespace="user:ann")[0]
    assert (hit.chunk.id, hit.chunk.text) == ("h-user:ann-3", "ann said thing 3")
    assert hit.chunk.metadata["embedder"] == EMBEDDER and hit.score == pytest.approx(1.0, abs=1e-5)
    assert vectors.count("user:bob") == 3
    window = target.window_store().load(WindowKey("a2", "", "ann"))
    assert window is not None and '"summary"' in window.state
    assert [i.key for i in target.item_store().scan(("memories",))] == ["k1", "k1"]


@pytest.mark.parametrize("target_backend", BACKENDS)
def test_a_second_import_adds_nothing(store_at: Any, target_backend: str, tmp_path: Path) -> None:
    _, source = store_at("sqlite")
    fill(source)
    path = tmp_path / "all.jsonl"
    export_memory(source, path)
    _, target = store_at(target_backend)
    import_memory(target, path, everything=True)
    before = [(s.scope, s.scope_id, s.project_id, s.count) for s in target.subjects(include_superseded=True)]
    again = import_memory(target, path, everything=True)
    assert (again.facts, again.recall, again.windows, again.items, again.kept) == (0, 0, 0, 0, 23)
    assert [(s.scope, s.scope_id, s.project_id, s.count) for s in target.subjects(include_superseded=True)] == before
    assert target.vector_store().count() == 10


def test_one_user_is_exported_and_nobody_else(any_location: str, store_at: Any, tmp_path: Path) -> None:
    source = make_fact_store(any_location)
    fill(source)
    path = tmp_path / "ann.jsonl"
    counts = export_memory(source, path, user_id="ann", project_id="")
    assert (counts.facts, counts.recall, counts.windows, counts.items) == (4, 5, 2, 1)
    text = path.read_text()
    assert "bob" not in text and "acme" not in text and "answer briefly" not in text
    everywhere = export_memory(source, tmp_path / "ann-all.jsonl", user_id="ann")
    assert (everywhere.facts, everywhere.recall) == (5, 7)  # every project of hers

    _, target = store_at("sqlite")
    target.add(Fact("is vegan", scope="user", scope_id="bob"))
    import_memory(target, path)
    assert [f.fact for f in target.list_active("user", "bob")] == ["is vegan"]  # untouched
    assert [f.fact for f in target.list_active("user", "ann")] == ["likes tea"]


@pytest.mark.redis
def test_a_copy_to_a_redis_cluster_and_back_keeps_everything(
    redis_cluster: Any, store_at: Any, tmp_path: Path
) -> None:
    from test_redis_cluster import drop_cluster_prefix

    from _env import unique_name

    _, source = store_at("sqlite")
    fill(source)
    prefix = unique_name("cluster")
    cluster = f"{redis_cluster.url}&prefix={prefix}"
    try:
        counts = copy_memory(source, cluster)
        assert (counts.facts, counts.recall, counts.windows, counts.items) == (7, 10, 3, 3)
        assert copy_memory(source, cluster).kept == 23  # a second copy adds nothing
        first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
        export_memory(source, first)
        export_memory(cluster, second)
        assert lines(second) == lines(first)
    finally:
        drop_cluster_prefix(redis_cluster, prefix)
