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
    """Destroy a store under a test prefix on the cluster (its keys on every primary)."""
    from fastaiagent.facts.redis.store import RedisFactStore

    store = RedisFactStore(cluster.url, prefix=prefix)
    try:
        store.destroy()
    finally:
        store.close()


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


def _borrow_module(path: str, name: str) -> Any:
    """Another test module (``path`` under tests/), loaded under ``name``."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent.parent / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _borrow_tests(path: str, name: str) -> dict[str, Any]:
    """The ``test_*`` functions of another test module, to run here with this
    module's fixtures (``windows``, ``items``) on the cluster."""
    import inspect

    module = _borrow_module(path, name)
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


def test_memory_on_a_cluster_location_round_trips_and_forgets(
    redis_cluster: RedisCluster, cluster_prefix: str
) -> None:
    from fastaiagent import Memory

    location = f"{redis_cluster.url}&prefix={cluster_prefix}"
    Memory(location=location, user_id="alice").persist("Prefers tea")
    Memory(location=location, user_id="bob").persist("Prefers coffee")
    fresh = Memory(location=location, user_id="alice")
    assert [f.fact for f in fresh.retrieve()] == ["Prefers tea"]
    assert fresh.forget("user", "alice") >= 1
    assert Memory(location=location, user_id="alice").retrieve() == []
    assert [f.fact for f in Memory(location=location, user_id="bob").retrieve()] == ["Prefers coffee"]
    keys = _prefix_keys(redis_cluster, cluster_prefix)
    assert not [k for k in keys if "alice" in k], "forget leaves no key naming the user"


def _prefix_keys(cluster: RedisCluster, prefix: str) -> list[str]:
    from redis.cluster import RedisCluster as Client

    client = Client(host="127.0.0.1", port=cluster.ports[0], decode_responses=True)
    try:
        return list(client.scan_iter(match=prefix + "*", count=1000))
    finally:
        client.close()


def test_every_key_of_a_subject_is_in_its_slot(cluster_store: Any, redis_cluster: RedisCluster) -> None:
    """Writes of every kind leave each subject's keys in one hash slot, so no script
    call spans slots: its own keys (tagged with the subject), and its facts' hashes
    and the slot's counter and subjects set (tagged with the slot, which the ids
    name); ids with braces cannot move a key out of its subject's slot."""
    from redis.cluster import RedisCluster as Client

    from fastaiagent.facts.fact import Fact

    store = cluster_store
    subjects = ["alice", "{bob}", "c}a{r:l", "%7B"]
    ids: dict[str, list[int]] = {}
    for sid in subjects:
        first = store.add(Fact("Lives in Paris", scope="user", scope_id=sid))
        second = store.update(Fact("Lives in Rome", scope="user", scope_id=sid), first)
        third = store.add(Fact("Short-lived", scope="user", scope_id=sid, valid_to=4102444800.0))
        ids[sid] = [first, second, third]
    client = Client(host="127.0.0.1", port=redis_cluster.ports[0], decode_responses=True)
    try:
        every = _prefix_keys(redis_cluster, store.prefix)
        for sid in subjects:
            parts = store._subject("user", sid, "")
            tag = "{" + ":".join(parts) + "}"
            own = [k for k in every if tag in k]
            assert len(own) >= 6, own  # rows, active, hist, key, old, exp...
            slot_keys = [store._fact_key(i) for i in ids[sid]] + store._slot_keys(parts)
            assert set(slot_keys[:3]) <= set(every)
            assert {client.keyslot(k) for k in own + slot_keys} == {client.keyslot(tag)}
        assert [f.fact for f in store.list_active("user", "{bob}")] == ["Short-lived", "Lives in Rome"]
        assert len({client.keyslot(store._sk("hist", store._subject("user", s, ""))) for s in subjects}) > 1
    finally:
        client.close()


def test_a_single_server_url_at_a_cluster_node_says_add_cluster_true(
    redis_cluster: RedisCluster, cluster_prefix: str
) -> None:
    from fastaiagent.errors import StoreConfigError
    from fastaiagent.facts.fact import Fact
    from fastaiagent.facts.redis.store import RedisFactStore

    plain = RedisFactStore(f"redis://127.0.0.1:{redis_cluster.ports[0]}/0", prefix=cluster_prefix)
    with pytest.raises(StoreConfigError, match=r"add \?cluster=true"):
        for sid in ("a", "b", "c", "d", "e", "f"):  # some subject's slot is on another node
            plain.add(Fact("x", scope="user", scope_id=sid))
    plain.close()


def test_cluster_true_at_a_single_server_says_drop_it(redis_url: str) -> None:
    from fastaiagent.errors import StoreConfigError
    from fastaiagent.facts.redis.store import RedisFactStore

    with pytest.raises(StoreConfigError, match=r"drop \?cluster=true"):
        RedisFactStore(f"{redis_url}?cluster=true", prefix="never-written")


def test_the_cluster_option_takes_true_or_false(redis_cluster: RedisCluster) -> None:
    from fastaiagent.facts.redis.store import RedisFactStore

    with pytest.raises(ValueError, match="cluster= takes true or false"):
        RedisFactStore(redis_cluster.url.replace("true", "yes"))
    with pytest.raises(ValueError, match="needs a cluster location"):
        RedisFactStore("redis://127.0.0.1:1/0?wait_replicas=1")


@pytest.mark.subprocess
def test_a_failover_loses_no_acknowledged_write(tmp_path: Any) -> None:
    """Writes go on while a primary is killed (-9) and its replica promoted: every
    write that returned is still there afterwards, whether its replica acknowledged
    it or it came back with an UnreplicatedWriteWarning (the promoted primary has no
    replica left, so its writes are stored there unreplicated until the old node
    rejoins as its replica). Nothing reported unreplicated is missing: a caller who
    repeated it would have written it twice."""
    import threading
    import time
    import warnings

    from _env import (
        replica_of,
        start_redis_cluster,
        wait_cluster_ok,
        wait_promoted,
        wait_replicas_linked,
    )
    from fastaiagent.errors import StoreUnavailableError, UnreplicatedWriteWarning
    from fastaiagent.facts.fact import Fact
    from fastaiagent.facts.redis.store import RedisFactStore

    cluster = start_redis_cluster(tmp_path)  # its own: this test breaks it
    try:
        store = RedisFactStore(cluster.url, prefix=unique_name("failover"))
        acked: list[tuple[int, str, str]] = []
        unreplicated: list[tuple[str, str]] = []
        refused: list[tuple[str, str]] = []
        broken: list[Exception] = []
        stop = threading.Event()

        def writer() -> None:
            n = 0
            while not stop.is_set():
                sid, text = f"user-{n % 40}", f"fact number {n}"
                try:
                    acked.append((store.add(Fact(text, scope="user", scope_id=sid)), sid, text))
                except UnreplicatedWriteWarning:  # raised by the filter below: stored all the same
                    unreplicated.append((sid, text))
                except StoreUnavailableError:  # the slot had no primary for longer than the retries
                    refused.append((sid, text))
                except Exception as exc:  # reported by the test, not lost with the thread
                    broken.append(exc)
                    return
                n += 1

        with warnings.catch_warnings():
            warnings.simplefilter("error", UnreplicatedWriteWarning)
            thread = threading.Thread(target=writer)
            thread.start()
            while len(acked) < 200:
                threading.Event().wait(0.02)
            victim = store.client.get_node_from_key(store._sk("hist", store._subject("user", "user-0", "")))
            survivors = [p for p in cluster.ports if p != int(victim.port)]
            heir = replica_of(survivors, int(victim.port))
            cluster.kill(int(victim.port))
            wait_promoted(heir)
            wait_cluster_ok(survivors, timeout=60)
            settled = time.monotonic() + 40  # writes go on against the new map
            while not (unreplicated and len(acked) > 200) and not broken and time.monotonic() < settled:
                time.sleep(0.1)
            stop.set()
            thread.join(timeout=60)
        assert not broken, broken
        assert len(acked) > 200 and unreplicated, "the promoted primary's writes were reported unreplicated"

        reader = RedisFactStore(cluster.url, prefix=store.prefix)
        for fact_id, sid, text in acked:
            got = reader.get(fact_id)
            assert got is not None and (got.scope_id, got.fact) == (sid, text), fact_id
        by_subject: dict[str, set[str]] = {}
        for _, sid, text in acked + [(0, sid, text) for sid, text in unreplicated]:
            by_subject.setdefault(sid, set()).add(text)
        for sid, texts in by_subject.items():  # the unreplicated ones are there too
            assert texts <= {f.fact for f in reader.list_active("user", sid, limit=None)}

        with pytest.warns(UnreplicatedWriteWarning, match="Do not repeat it"):
            alone = reader.add(Fact("while alone", scope="user", scope_id="user-0"))
        assert reader.get(alone) is not None  # returned its id, and is stored
        cluster.restart(int(victim.port))
        wait_cluster_ok(cluster.ports, timeout=60)
        wait_replicas_linked(cluster.ports, timeout=60)
        with warnings.catch_warnings():
            warnings.simplefilter("error", UnreplicatedWriteWarning)
            new_id = reader.add(Fact("after the failover", scope="user", scope_id="user-0"))
        assert store.get(new_id) is not None and reader.get(new_id) is not None
        store.close()
        reader.close()
    finally:
        cluster.stop()


def test_a_cluster_without_replicas_is_seen_at_open(tmp_path: Any) -> None:
    """No replica anywhere: the store says so once when it opens and its writes wait
    for none (not 2 s each, and never refused); asking for replicas is refused there."""
    import warnings

    import redis

    from _env import start_redis_cluster
    from fastaiagent.errors import StoreConfigError, UnreplicatedWriteWarning
    from fastaiagent.facts.fact import Fact
    from fastaiagent.facts.redis.store import RedisFactStore

    cluster = start_redis_cluster(tmp_path, replicas=0)
    try:
        prefix = unique_name("alone")
        with pytest.warns(UnreplicatedWriteWarning, match="has no replicas"):
            store = RedisFactStore(cluster.url, prefix=prefix)
        with warnings.catch_warnings():
            warnings.simplefilter("error", UnreplicatedWriteWarning)
            ids = [store.add(Fact(f"fact {n}", scope="user", scope_id=f"u{n % 5}")) for n in range(20)]
        assert all(store.get(i) is not None for i in ids)
        waits = 0  # no write waited out WAIT's 2 s for a replica that does not exist
        for port in cluster.ports:
            node = redis.Redis(port=port, decode_responses=True)
            waits += int(node.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))
            node.close()
        assert waits == 0
        with pytest.raises(StoreConfigError, match=r"wait_replicas= to 0"):
            RedisFactStore(cluster.url + "&wait_replicas=1", prefix=prefix)
        store.close()
    finally:
        cluster.stop()


def test_reindex_lists_subjects_the_sets_lost(cluster_store: Any) -> None:
    """reindex() on a cluster indexes every fact hash again, in its slot: subjects
    missing from the per-slot subjects sets are listed again."""
    from fastaiagent.facts.fact import Fact

    store = cluster_store
    ids = [store.add(Fact(f"fact {n}", scope="user", scope_id=f"u{n % 3}")) for n in range(6)]
    for key in list(store.client.scan_iter(match=store.prefix + ":subjects:*")):
        store.client.delete(key)
    assert store.subjects() == []
    assert store.reindex() == 6
    assert [store.get(i).fact for i in ids] == [f"fact {n}" for n in range(6)]  # type: ignore[union-attr]
    assert len(store.subjects()) == 3
    assert store.add(Fact("one more", scope="user", scope_id="u0")) not in ids


def test_a_forked_child_takes_ids_of_its_own(cluster_store: Any) -> None:
    import multiprocessing

    from fastaiagent.facts.fact import Fact

    store = cluster_store
    first = store.add(Fact("parent", scope="user", scope_id="p"))
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(
        target=lambda: queue.put(store.add(Fact("child", scope="user", scope_id="c")))
    )
    child.start()
    child_id = queue.get(timeout=30)
    child.join(timeout=30)
    parent_id = store.add(Fact("parent again", scope="user", scope_id="p"))
    assert len({first, child_id, parent_id}) == 3
    assert store.get(child_id).fact == "child"  # type: ignore[union-attr]


def _holding(cluster: RedisCluster, prefix: str, needle: str) -> list[str]:
    """Keys of ``prefix`` on every primary whose name or value holds ``needle``."""
    from redis.cluster import RedisCluster as Client

    client, raw, out = Client(host="127.0.0.1", port=cluster.ports[0]), needle.encode(), []
    try:
        for key in client.scan_iter(match=prefix + "*", count=1000):
            kind = client.type(key).decode()
            values: list[bytes] = []
            if kind == "string":
                values = [client.get(key) or b""]
            elif kind == "hash":
                values = [k + b"=" + v for k, v in client.hgetall(key).items()]
            elif kind == "set":
                values = list(client.smembers(key))
            elif kind == "zset":
                values = list(client.zrange(key, 0, -1))
            if raw in key or any(raw in v for v in values):
                out.append(key.decode(errors="replace"))
    finally:
        client.close()
    return out


@pytest.mark.subprocess
def test_a_plain_memory_forgets_every_copy_on_a_cluster(
    redis_cluster: RedisCluster, cluster_prefix: str
) -> None:
    """As test_forget_everywhere on one server: facts, fact vectors, recalled turns,
    postings, windows and summaries of a user, written by another process, are gone
    from every node after a plain Memory forgets them; the other user's stay."""
    import uuid

    from fastaiagent import Memory

    forget = _borrow_module("backends/test_forget_everywhere.py", "_cluster_forget_tests")
    location = f"{redis_cluster.url}&prefix={cluster_prefix}"
    carol, dave = f"carol{uuid.uuid4().hex[:6]}", f"dave{uuid.uuid4().hex[:6]}"
    gone, kept = f"quokka{uuid.uuid4().hex[:8]}", f"wombat{uuid.uuid4().hex[:8]}"
    forget.write(location, carol, gone)
    forget.write(location, dave, kept, turns=5)
    assert _holding(redis_cluster, cluster_prefix, gone), "the writer left nothing to forget"
    Memory(location).forget("user", carol)
    assert _holding(redis_cluster, cluster_prefix, gone) == []
    assert _holding(redis_cluster, cluster_prefix, carol) == []
    assert _holding(redis_cluster, cluster_prefix, kept)


def test_each_vector_namespace_is_in_its_own_slot(cluster_store: Any, redis_cluster: RedisCluster) -> None:
    from redis.cluster import RedisCluster as Client

    from fastaiagent.kb.protocols import Chunk

    index = cluster_store.vector_store()
    names = ["alice", "bob", "", "{x}"]
    for n, name in enumerate(names):
        index.add([Chunk(f"c{n}-{i}", f"words of {name} number {i}", [1.0, float(i), 0.5],
                         {"namespace": name}) for i in range(3)])  # fmt: skip
    client = Client(host="127.0.0.1", port=redis_cluster.ports[0], decode_responses=True)
    try:
        slots = set()
        for name in names:
            token = index._ns(name)
            keys = [k for k in _prefix_keys(redis_cluster, cluster_store.prefix) if token in k]
            assert len(keys) >= 5, keys
            assert len({client.keyslot(k) for k in keys}) == 1, keys
            slots.add(client.keyslot(keys[0]))
        assert len(slots) > 1
    finally:
        client.close()
    assert index.count(namespace="bob") == 3


def test_cluster_replies_become_library_errors() -> None:
    from redis import exceptions

    from fastaiagent.errors import StoreConfigError, StoreCorruptError, StoreUnavailableError
    from fastaiagent.facts.redis.client import redis_failure

    moved = redis_failure(exceptions.MovedError("6254 127.0.0.1:7002"), "the fact store")
    assert isinstance(moved, StoreConfigError) and "add ?cluster=true" in str(moved)
    script = exceptions.ResponseError("Script attempted to access a non local key in a cluster node")
    assert "add ?cluster=true" in str(redis_failure(script, "the fact store"))
    crossed = redis_failure(exceptions.ResponseError("CROSSSLOT Keys in request don't hash"), "x")
    assert isinstance(crossed, StoreCorruptError)
    down = redis_failure(exceptions.ClusterDownError("CLUSTERDOWN The cluster is down"), "x")
    assert isinstance(down, StoreUnavailableError)
    uncovered = redis_failure(exceptions.SlotNotCoveredError('Slot "12" is not covered'), "x")
    assert isinstance(uncovered, StoreUnavailableError)


def test_a_redis_cluster_client_can_be_passed(redis_cluster: RedisCluster, cluster_prefix: str) -> None:
    """``client=`` a RedisCluster of your own: the cluster layout, without ?cluster=true;
    the store's own cluster client gates each node's connections by that node's health."""
    from redis.cluster import RedisCluster as Client

    from fastaiagent.facts.fact import Fact
    from fastaiagent.facts.redis.store import RedisFactStore

    mine = Client(host="127.0.0.1", port=redis_cluster.ports[1], decode_responses=True)
    store = RedisFactStore("redis://ignored:1/0", prefix=cluster_prefix, client=mine)
    assert store.cluster
    fact_id = store.add(Fact("Uses its own client", scope="user", scope_id="zoe"))
    own = RedisFactStore(redis_cluster.url, prefix=cluster_prefix)
    assert own.get(fact_id).fact == "Uses its own client"  # type: ignore[union-attr]
    pools = [node.redis_connection.connection_pool for node in own.client.get_nodes()]
    assert pools and all(p.connection_class.__name__.startswith("Guarded") for p in pools)
    own.close()
    mine.close()


def test_a_users_messages_are_listed_and_one_deleted_on_a_cluster(
    redis_cluster: RedisCluster, cluster_prefix: str
) -> None:
    from _recalled_sample import ANN, recalled, seeded_memory
    from fastaiagent.facts import messages

    memory = seeded_memory(f"{redis_cluster.url}&prefix={cluster_prefix}")
    store = memory.location
    listed = messages.list_messages(store, "ann", limit=2)
    assert [m.text for m in listed] == [ANN[2].content, ANN[1].content]
    assert messages.count_messages(store, "ann") == 3
    assert {(u.user_id, u.messages) for u in messages.message_users(store)} == {("ann", 3), ("bob", 1)}
    assert [m.text for m in messages.search_messages(store, "ann", "Porto")] == [ANN[2].content]
    bobs = messages.list_messages(store, "bob")[0].id
    assert not messages.delete_message(store, "ann", bobs)
    assert messages.delete_message(store, "ann", listed[0].id)
    assert "Porto" not in recalled(memory, "ann", "Where did I move to?")
    assert bobs in {m.id for m in messages.list_messages(store, "bob")}
    store.close()
