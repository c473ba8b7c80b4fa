"""Location options against real servers (issue #46): the driver's own options still
reach the driver and work, a misspelt one is refused before any server is asked
(a Redis Cluster's too), and a value the driver refuses is a configuration error."""

from __future__ import annotations

import time

import pytest

from _env import postgres_location, redis_location, unique_name
from fastaiagent import Memory
from fastaiagent.errors import InvalidValueError, StoreConfigError


@pytest.mark.postgres
def test_libpq_options_reach_postgres_and_a_typo_never_does(postgres_url, pg_table):
    location = postgres_location(postgres_url, pg_table) + "&application_name=fa46_app&connect_timeout=3"
    memory = Memory(location)
    memory.persist("Likes tea", id="alice")
    assert [f.fact for f in memory.retrieve(id="alice")] == ["Likes tea"]
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        names = {row[0] for row in conn.execute("SELECT application_name FROM pg_stat_activity")}
    assert "fa46_app" in names
    with pytest.raises(InvalidValueError, match="did you mean 'application_name'"):
        Memory(location + "&aplication_name=x")
    with pytest.raises(StoreConfigError, match="correct that value in the URL"):
        Memory(postgres_location(postgres_url, pg_table) + "&sslmode=sometimes").warm()


@pytest.mark.redis
def test_redis_py_options_reach_redis_and_a_typo_never_does(redis_url, redis_prefix):
    location = redis_location(redis_url, redis_prefix) + "&socket_timeout=3&health_check_interval=30"
    memory = Memory(location)
    memory.persist("Likes tea", id="alice")
    assert [f.fact for f in memory.retrieve(id="alice")] == ["Likes tea"]
    assert memory.location.client.connection_pool.connection_kwargs["socket_timeout"] == 3.0  # type: ignore[attr-defined]
    with pytest.raises(InvalidValueError, match="did you mean 'prefix'"):
        Memory(f"{redis_url}?prefx={redis_prefix}")


@pytest.mark.redis
def test_a_cluster_location_is_checked_before_a_node_is_asked(redis_cluster):
    prefix = unique_name("opt")
    started = time.monotonic()
    with pytest.raises(InvalidValueError, match="did you mean 'wait_replicas'"):
        Memory(f"{redis_cluster.url}&prefix={prefix}&wait_replica=1")
    assert time.monotonic() - started < 1.0  # refused, not a connection attempt
    memory = Memory(f"{redis_cluster.url}&prefix={prefix}&socket_timeout=5")
    memory.persist("Likes tea", id="alice")
    assert [f.fact for f in memory.retrieve(id="alice")] == ["Likes tea"]
    memory.forget(id="alice")
