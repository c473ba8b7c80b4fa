"""The Redis stores on a real Redis Cluster (three primaries, one replica each,
started by the ``redis_cluster`` fixture): the conformance suites, the key
layout (one slot per subject), errors, and a failover that loses no
acknowledged write."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from _env import RedisCluster, unique_name
from fastaiagent.facts.conformance import FactStoreConformance
from fastaiagent.facts.conformance.vectors import StoredVectorIndexConformance
from fastaiagent.facts.store import FactStore

pytestmark = pytest.mark.redis


def drop_cluster_prefix(cluster: RedisCluster, prefix: str) -> None:
    """Delete a test prefix's keys from every primary of the cluster."""
    from redis.cluster import RedisCluster as Client

    client = Client(host="127.0.0.1", port=cluster.ports[0])
    try:
        for key in list(client.scan_iter(match=prefix + "*", count=1000)):
            client.delete(key)
    finally:
        client.close()


@pytest.fixture
def cluster_prefix(redis_cluster: RedisCluster) -> Iterator[str]:
    prefix = unique_name("cluster")
    yield prefix
    drop_cluster_prefix(redis_cluster, prefix)


class TestRedisClusterConformance(FactStoreConformance):
    @pytest.fixture
    def store(self, redis_cluster: RedisCluster, cluster_prefix: str) -> Iterator[FactStore]:
        from fastaiagent.facts.redis.store import RedisFactStore

        s = RedisFactStore(redis_cluster.url, prefix=cluster_prefix)
        self.cluster = redis_cluster
        yield s
        s.close()

    def break_connections(self, store: FactStore) -> None:
        """CLIENT KILL the store's connections on every node."""
        import redis

        for port in self.cluster.ports:
            admin = redis.Redis(port=port)
            own = admin.client_id()
            for client in admin.client_list():
                if int(client["id"]) != own and client.get("name") == getattr(store, "client_name", None):
                    admin.client_kill_filter(_id=int(client["id"]))
            admin.close()

    def unreachable_store(self) -> FactStore:
        from fastaiagent.facts.redis.store import RedisFactStore

        return RedisFactStore("redis://127.0.0.1:1/0", prefix="unreachable")


def _slot(client: Any, key: str) -> int:
    return int(client.keyslot(key))


def _borrow_tests(path: str, name: str) -> dict[str, Any]:
    """The ``test_*`` functions of another test module, to run here with this
    module's fixtures (``windows``, ``items``) on the cluster."""
    import importlib.util
    import inspect
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent.parent / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    wanted = {"items", "windows"}
    return {
        key: value
        for key, value in vars(module).items()
        if key.startswith("test_") and set(inspect.signature(value).parameters) <= wanted
    }


@pytest.fixture
def cluster_store(redis_cluster: RedisCluster, cluster_prefix: str) -> Iterator[Any]:
    from fastaiagent.facts.redis.store import RedisFactStore

    store = RedisFactStore(redis_cluster.url, prefix=cluster_prefix)
    yield store
    store.close()


@pytest.fixture
def windows(cluster_store: Any) -> Any:
    from fastaiagent.agent.windows import window_store_for

    return window_store_for(cluster_store)


@pytest.fixture
def items(cluster_store: Any) -> Any:
    return cluster_store.item_store()


globals().update(_borrow_tests("backends/test_window_store.py", "_cluster_window_tests"))
globals().update(_borrow_tests("integrations/test_item_store.py", "_cluster_item_tests"))


class TestClusterVectorIndex(StoredVectorIndexConformance):
    @pytest.fixture
    def open_index(self, redis_cluster: RedisCluster, cluster_prefix: str) -> Iterator[Callable[[], Any]]:
        from fastaiagent.facts.redis.store import RedisFactStore

        stores: list[Any] = []

        def opener() -> Any:
            stores.append(RedisFactStore(redis_cluster.url, prefix=cluster_prefix))
            return stores[-1].vector_store()

        yield opener
        for store in stores:
            store.close()
