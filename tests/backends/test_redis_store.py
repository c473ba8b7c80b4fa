"""RedisFactStore specifics: older-layout indexing, reindex, per-subject rows,
key escaping, atomic writes."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import pytest

from _env import require_module
from fastaiagent.learn import SOURCE_CONVERSATION, Fact, make_fact_store

pytestmark = pytest.mark.redis
redis = require_module("redis")  # a missing driver fails under CI=true


from fastaiagent.facts.redis import (  # noqa: E402
    LAYOUT_VERSION,
    ROW_FIELDS,
    RedisFactStore,
    escape_part,
    unescape_part,
)


def _raw(url: str):  # type: ignore[no-untyped-def]
    return redis.Redis.from_url(url, decode_responses=True)


def _write_old_fact(client, prefix: str, fact_id: int, text: str, scope_id: str, **extra) -> None:  # type: ignore[no-untyped-def]
    """A fact as an older SDK wrote it: a bare hash, no index entries, no fact_key."""
    fields = {
        "fact": text,
        "scope": "user",
        "scope_id": scope_id,
        "project_id": "",
        "confidence": "1.0",
        "source": "manual",
        "created_at": repr(time.time() - 1000 + fact_id),
        "metadata": json.dumps({}),
        **extra,
    }
    client.hset(f"{prefix}:fact:{fact_id}", mapping=fields)
    client.set(f"{prefix}:seq", fact_id)


def test_location_urls_select_the_redis_store(redis_url: str) -> None:
    for scheme in ("redis://", "rediss://"):
        store = make_fact_store(scheme + redis_url.split("://", 1)[1])
        assert isinstance(store, RedisFactStore)
        assert store.prefix == "fastaiagent"
        store.close()


def test_key_parts_escape_colons_and_percent() -> None:
    for part in ("a:b", "a%3Ab", "%", "::", "", "*", "日本:語"):
        assert ":" not in escape_part(part)
        assert unescape_part(escape_part(part)) == part
    assert escape_part("a:b") != escape_part("a%3Ab")


def test_first_open_indexes_an_older_namespace_once(redis_url: str, redis_prefix: str) -> None:
    raw = _raw(redis_url)
    _write_old_fact(raw, redis_prefix, 1, "Old fact one", "alice")
    _write_old_fact(raw, redis_prefix, 2, "Old fact two", "alice")
    _write_old_fact(raw, redis_prefix, 3, "Old replaced", "alice", superseded_by="2")
    _write_old_fact(raw, redis_prefix, 4, "Bob's old fact", "bob")
    store = RedisFactStore(redis_url, prefix=redis_prefix)
    assert [f.fact for f in store.list_active("user", "alice")] == ["Old fact two", "Old fact one"]
    assert [f.fact for f in store.list_active("user", "bob")] == ["Bob's old fact"]
    assert store.add(Fact("old fact ONE", scope="user", scope_id="alice")) == 1  # idempotent
    new_id = store.add(Fact("New fact", scope="user", scope_id="alice"))
    assert new_id > 4  # the id counter continues past the old ids
    assert raw.get(f"{redis_prefix}:layout") == LAYOUT_VERSION
    _assert_rows_match(raw, redis_prefix, "", "user", "alice")

    # An old writer keeps writing: a second store on the marked namespace does
    # not scan again, so the fact stays invisible until reindex().
    _write_old_fact(raw, redis_prefix, 50, "Written by an old SDK later", "alice")
    later = RedisFactStore(redis_url, prefix=redis_prefix)
    assert "Written by an old SDK later" not in [f.fact for f in later.list_active("user", "alice")]
    assert later.reindex() == 6
    assert "Written by an old SDK later" in [f.fact for f in later.list_active("user", "alice")]
    assert later.add(Fact("after reindex", scope="user", scope_id="alice")) > 50


def test_reindex_is_safe_to_repeat(redis_url: str, redis_prefix: str) -> None:
    raw = _raw(redis_url)
    store = RedisFactStore(redis_url, prefix=redis_prefix)
    a = store.add(Fact("A", scope="user", scope_id="u"))
    store.update(Fact("B", scope="user", scope_id="u"), a)
    store.add(Fact("C", scope="user", scope_id="v:w"))
    before = sorted((k, raw.type(k)) for k in raw.scan_iter(match=redis_prefix + ":*"))
    snapshot = {k: raw.dump(k) for k, _ in before if not k.endswith(":layout")}
    for _ in range(3):
        assert store.reindex() == 3
    after = sorted((k, raw.type(k)) for k in raw.scan_iter(match=redis_prefix + ":*"))
    assert after == before
    assert {k: raw.dump(k) for k in snapshot} == snapshot
    assert [f.fact for f in store.list_active("user", "u")] == ["B"]


def test_reindex_drops_facts_an_old_writer_superseded(redis_url: str, redis_prefix: str) -> None:
    raw = _raw(redis_url)
    store = RedisFactStore(redis_url, prefix=redis_prefix)
    a = store.add(Fact("A", scope="user", scope_id="u"))
    store.add(Fact("B", scope="user", scope_id="other"))
    raw.hset(f"{redis_prefix}:fact:{a}", "superseded_by", "999")  # an old SDK's supersede
    # The cross-subject read checks every hash; a subject's rows wait for reindex.
    assert [f.fact for f in store.list_active("user", "*")] == ["B"]
    store.reindex()
    assert store.list_active("user", "u") == []
    assert raw.zcard(f"{redis_prefix}:active::user:u") == 0
    assert raw.zcard(f"{redis_prefix}:rows::user:u") == 0
    assert [f.fact for f in store.list_active("user", "other")] == ["B"]  # untouched


def test_limit_n_returns_n_despite_dangling_index_entries(
    redis_url: str, redis_prefix: str
) -> None:
    """H19: entries whose hash was removed by someone else never shorten a page:
    the cross-subject read skips them, and reindex drops them from a subject's rows."""
    raw = _raw(redis_url)
    store = RedisFactStore(redis_url, prefix=redis_prefix)
    ids = [store.add(Fact(f"f{i}", scope="user", scope_id="u")) for i in range(10)]
    for fact_id in ids[5:]:
        raw.delete(f"{redis_prefix}:fact:{fact_id}")  # newest five vanish behind our back
    assert [f.fact for f in store.list_active("user", "*", limit=3)] == ["f4", "f3", "f2"]
    assert len(store.list_active("user", "*", limit=5)) == 5
    store.reindex()
    assert [f.fact for f in store.list_active("user", "u", limit=3)] == ["f4", "f3", "f2"]
    assert len(store.list_active("user", "u", limit=5)) == 5
    assert len(store.list_active("user", "u", limit=8)) == 5
    _assert_rows_match(raw, redis_prefix, "", "user", "u")


def test_colliding_looking_ids_have_distinct_keys(redis_url: str, redis_prefix: str) -> None:
    raw = _raw(redis_url)
    store = RedisFactStore(redis_url, prefix=redis_prefix)
    store.add(Fact("one", scope="user", scope_id="a:b", project_id="c"))
    store.add(Fact("two", scope="user", scope_id="b", project_id="c:a"))
    active = sorted(k for k in raw.scan_iter(match=redis_prefix + ":active:*"))
    assert len(active) == 2
    assert [f.fact for f in store.list_active("user", "a:b", "c")] == ["one"]
    assert [f.fact for f in store.list_active("user", "b", "c:a")] == ["two"]


def test_prefix_with_glob_characters_reindexes_only_itself(
    redis_url: str, redis_prefix: str
) -> None:
    raw = _raw(redis_url)
    _write_old_fact(raw, redis_prefix + "x", 1, "a neighbour's fact", "alice")
    try:
        store = RedisFactStore(redis_url, prefix=redis_prefix + "*")
        assert store.reindex() == 0
        assert store.list_active("user", "alice") == []
    finally:
        for key in list(raw.scan_iter(match=redis_prefix + "*")):
            raw.delete(key)


def test_dead_port_is_a_clear_connection_error() -> None:
    store = RedisFactStore("redis://127.0.0.1:1/0", prefix="nowhere")
    with pytest.raises(ConnectionError, match="cannot reach Redis"):
        store.add(Fact("x", scope="user", scope_id="u"))
    with pytest.raises(ConnectionError):
        store.reindex()


class _CuttingProxy:
    """A TCP proxy to the real Redis that drops the client's connection instead
    of forwarding an EXEC: the server sees MULTI and the queued commands, then
    a disconnect, exactly like a client crash in the middle of a write."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.cut = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, outbound: bool) -> None:
        try:
            while data := src.recv(65536):
                if outbound and self.cut.is_set() and b"EXEC" in data.upper():
                    head = data[: data.upper().index(b"*1\r\n$4\r\nEXEC")]
                    dst.sendall(head)
                    time.sleep(0.05)
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.close()

    def close(self) -> None:
        self.listener.close()


def test_a_write_cut_before_exec_leaves_nothing_half_written(
    redis_url: str, redis_prefix: str
) -> None:
    host_port = redis_url.split("://", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    proxy = _CuttingProxy(host, int(port))
    raw = _raw(redis_url)
    try:
        store = RedisFactStore(f"redis://127.0.0.1:{proxy.port}/0", prefix=redis_prefix)
        kept = store.add(Fact("before the cut", scope="user", scope_id="u"))
        keys_before = set(raw.scan_iter(match=redis_prefix + ":*"))
        proxy.cut.set()
        with pytest.raises(ConnectionError):
            store.add(Fact("never lands", scope="user", scope_id="u"))
        with pytest.raises(ConnectionError):
            store.update(Fact("never lands either", scope="user", scope_id="u"), kept)
        store.close()
        keys_after = set(raw.scan_iter(match=redis_prefix + ":*"))
        assert keys_after == keys_before  # no hash, index or content key of the lost writes
        direct = RedisFactStore(redis_url, prefix=redis_prefix)
        assert [f.fact for f in direct.list_active("user", "u")] == ["before the cut"]
        assert direct.get(kept).active  # type: ignore[union-attr]
    finally:
        proxy.close()


def test_an_indexed_fact_without_a_row_is_read_field_by_field(
    redis_url: str, redis_prefix: str
) -> None:
    raw = _raw(redis_url)
    store = RedisFactStore(redis_url, prefix=redis_prefix)
    ids = [
        store.add(Fact(f"f{i}", scope="user", scope_id="u", metadata={"i": i})) for i in range(3)
    ]
    raw.hdel(f"{redis_prefix}:fact:{ids[1]}", "row")
    got = store.list_active("user", "*")
    assert [(f.id, f.fact, f.metadata) for f in got] == [
        (ids[2], "f2", {"i": 2}),
        (ids[1], "f1", {"i": 1}),
        (ids[0], "f0", {"i": 0}),
    ]
    assert got == [store.get(i) for i in reversed(ids)]
    assert store.list_active("user", "u") == got


# -- per-subject rows ---------------------------------------------------------


def _assert_rows_match(raw, prefix: str, project: str, scope: str, scope_id: str) -> None:  # type: ignore[no-untyped-def]
    """A subject's rows index lists exactly its active ids, in the same order,
    each with the row its fact hash holds (the read path trusts this)."""
    subject = ":".join(escape_part(p) for p in (project, scope, scope_id))
    rows = raw.zrevrange(f"{prefix}:rows:{subject}", 0, -1, withscores=True)
    active = raw.zrevrange(f"{prefix}:active:{subject}", 0, -1, withscores=True)
    assert [(entry[:20], score) for entry, score in rows] == active
    for entry, _ in rows:
        stored = raw.hgetall(f"{prefix}:fact:{int(entry[:20])}")
        assert stored["superseded_by"] == ""
        assert entry[20:] == stored["row"]
        assert len(json.loads(entry[20:])) == len(ROW_FIELDS)


def test_rows_follow_every_write(redis_url: str, redis_prefix: str) -> None:
    raw = _raw(redis_url)
    store = RedisFactStore(redis_url, prefix=redis_prefix)

    def check() -> None:
        for subject in ("u", "v:w"):
            _assert_rows_match(raw, redis_prefix, "p", "user", subject)
            got = store.list_active("user", subject, "p", limit=None)
            assert got == [store.get(f.id) for f in got]  # type: ignore[arg-type]
            assert all(f.active for f in got)

    a = store.add(Fact("A", scope="user", scope_id="u", project_id="p", metadata={"k": [1]}))
    b = store.add(Fact("B", scope="user", scope_id="u", project_id="p", source=SOURCE_CONVERSATION))
    store.add(Fact("C", scope="user", scope_id="u", project_id="p", source=SOURCE_CONVERSATION))
    store.add(Fact("W", scope="user", scope_id="v:w", project_id="p", source_trace_id="t1"))
    check()
    a2 = store.update(Fact("A two", scope="user", scope_id="u", project_id="p"), a)
    check()
    store.supersede(b, a2)
    check()
    assert [f.fact for f in store.list_active("user", "u", "p")] == ["A two", "C"]
    assert store.prune_learned("user", "u", "p", keep=0) == 1  # C
    check()
    assert store.delete("user", "u", "p", fact="a two") == 1
    check()
    assert store.list_active("user", "u", "p") == []
    assert [f.fact for f in store.list_active("user", "v:w", "p")] == ["W"]
    store.add(Fact("D", scope="user", scope_id="u", project_id="p"))
    check()
    assert store.delete("user", "u", "p") >= 1
    assert not raw.exists(f"{redis_prefix}:rows:p:user:u")
    check()
    assert [f.fact for f in store.list_active("user", "v:w", "p")] == ["W"]


def test_a_layout_2_namespace_gets_rows_on_first_open(redis_url: str, redis_prefix: str) -> None:
    """A namespace indexed by the previous layout (active indexes, a ``doc``
    field, no rows) is given rows once, on first open; reads then use them."""
    raw = _raw(redis_url)
    store = RedisFactStore(redis_url, prefix=redis_prefix)
    ids = [store.add(Fact(f"f{i}", scope="user", scope_id="u")) for i in range(3)]
    old = store.update(Fact("f1 new", scope="user", scope_id="u"), ids[1])
    store.add(Fact("elsewhere", scope="user", scope_id="x"))
    expected = store.list_active("user", "u")
    for key in raw.scan_iter(match=f"{redis_prefix}:rows:*"):
        raw.delete(key)
    for fact_id in [*ids, old]:
        raw.hdel(f"{redis_prefix}:fact:{fact_id}", "row")
        raw.hset(f"{redis_prefix}:fact:{fact_id}", "doc", "[]")
    raw.set(f"{redis_prefix}:layout", "2")

    reopened = RedisFactStore(redis_url, prefix=redis_prefix)
    assert reopened.list_active("user", "u") == expected
    assert [f.fact for f in expected] == ["f1 new", "f2", "f0"]
    assert raw.get(f"{redis_prefix}:layout") == LAYOUT_VERSION
    assert not any(raw.hexists(f"{redis_prefix}:fact:{i}", "doc") for i in [*ids, old])
    _assert_rows_match(raw, redis_prefix, "", "user", "u")
    _assert_rows_match(raw, redis_prefix, "", "user", "x")


def test_reindex_prunes_a_large_subject_in_steps(redis_url: str, redis_prefix: str) -> None:
    """Rows are checked a few hundred at a time; entries removed mid-way must not
    make the next step skip any."""
    raw = _raw(redis_url)
    store = RedisFactStore(redis_url, prefix=redis_prefix)
    store.list_active("user", "nobody")  # first open
    writer = raw.pipeline(transaction=False)
    for fact_id in range(1, 1301):
        fact = Fact(f"fact {fact_id}", scope="user", scope_id="big", created_at=1000.0 + fact_id)
        store._queue_create(writer, fact_id, fact, f"fact {fact_id}")
    writer.set(f"{redis_prefix}:seq", 1300)
    writer.execute()
    gone = set(range(1, 1301, 7))  # spread over every step
    for fact_id in gone:
        raw.delete(f"{redis_prefix}:fact:{fact_id}")
    store.reindex()
    _assert_rows_match(raw, redis_prefix, "", "user", "big")
    got = store.list_active("user", "big", limit=None)
    assert [f.id for f in got] == [i for i in range(1300, 0, -1) if i not in gone]
