"""RedisFactStore specifics: older-layout indexing, reindex, per-subject rows,
key escaping, atomic script writes under concurrency, bounded large deletes.
Layout upgrades, the script cache and error classes: test_redis_layout.py."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import pytest

from _env import destroy_redis, require_module
from fastaiagent.errors import StoreUnavailableError
from fastaiagent.learn import SOURCE_CONVERSATION, Fact, make_fact_store

pytestmark = pytest.mark.redis
redis = require_module("redis")  # a missing driver fails under CI=true


from fastaiagent.facts.redis.layout import ROW_FIELDS, escape_part, unescape_part  # noqa: E402
from fastaiagent.facts.redis.store import LAYOUT_VERSION, RedisFactStore  # noqa: E402


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
    # SCAN may return a key twice while the server rehashes (other tests write): a set.
    before = sorted({(k, raw.type(k)) for k in raw.scan_iter(match=redis_prefix + ":*")})
    snapshot = {k: raw.dump(k) for k, _ in before if not k.endswith(":layout")}
    for _ in range(3):
        assert store.reindex() == 3
    after = sorted({(k, raw.type(k)) for k in raw.scan_iter(match=redis_prefix + ":*")})
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
    """Acceptance H19: entries whose hash was removed by someone else never shorten a page:
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
    active = sorted(set(raw.scan_iter(match=redis_prefix + ":active:*")))  # SCAN may repeat a key
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
        destroy_redis(redis_url, redis_prefix + "x")
        destroy_redis(redis_url, redis_prefix + "*")


def test_dead_port_is_a_clear_connection_error() -> None:
    store = RedisFactStore("redis://127.0.0.1:1/0", prefix="nowhere")
    with pytest.raises(ConnectionError, match="cannot reach Redis"):
        store.add(Fact("x", scope="user", scope_id="u"))
    with pytest.raises(ConnectionError, match="cannot reach Redis"):
        store.reindex()


class _CuttingProxy:
    """A TCP proxy to the real Redis that, once ``cut`` is set, forwards only the
    first half of a write's script call (EVALSHA / EVAL) and then drops the
    connection: the server sees an incomplete command and a disconnect, exactly
    like a client crash in the middle of sending a write."""

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
                if outbound and self.cut.is_set() and b"EVAL" in data.upper():
                    dst.sendall(data[: len(data) // 2])
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.close()

    def close(self) -> None:
        self.listener.close()


def test_a_write_cut_mid_command_leaves_nothing_half_written(
    redis_url: str, redis_prefix: str
) -> None:
    host_port = redis_url.split("://", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    proxy = _CuttingProxy(host, int(port))
    raw = _raw(redis_url)
    try:
        store = RedisFactStore(f"redis://127.0.0.1:{proxy.port}/0", prefix=redis_prefix)
        kept = store.add(Fact("before the cut", scope="user", scope_id="u"))
        keys_before = {k: raw.dump(k) for k in raw.scan_iter(match=redis_prefix + ":*")}
        proxy.cut.set()
        with pytest.raises(StoreUnavailableError, match="cannot reach Redis"):
            store.add(Fact("never lands", scope="user", scope_id="u"))
        with pytest.raises(StoreUnavailableError, match="cannot reach Redis"):
            store.update(Fact("never lands either", scope="user", scope_id="u"), kept)
        with pytest.raises(StoreUnavailableError, match="cannot reach Redis"):
            store.delete("user", "u")
        store.close()
        keys_after = {k: raw.dump(k) for k in raw.scan_iter(match=redis_prefix + ":*")}
        assert keys_after == keys_before  # not one key written, changed or removed
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


# -- atomic scripts under concurrency -------------------------------------------


def _race(workers: int, work) -> tuple[list, list]:  # type: ignore[no-untyped-def]
    """Run ``work(i)`` on ``workers`` threads released together; (results, errors)."""
    barrier = threading.Barrier(workers)
    results: list = []
    errors: list = []

    def run(i: int) -> None:
        barrier.wait(timeout=30)
        try:
            results.append(work(i))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results, errors


def test_concurrent_updates_of_one_fact_leave_exactly_one_winner(
    redis_url: str, redis_prefix: str
) -> None:
    raw = _raw(redis_url)
    store = RedisFactStore(redis_url, prefix=redis_prefix)
    old = store.add(Fact("Prefers email", scope="user", scope_id="u"))
    winners, losers = _race(
        8, lambda i: store.update(Fact(f"Prefers channel {i}", scope="user", scope_id="u"), old)
    )
    assert len(winners) == 1, (winners, losers)
    assert len(losers) == 7
    for exc in losers:
        with pytest.raises(ValueError, match=f"#{old} is already superseded by #{winners[0]}"):
            raise exc
    assert [f.id for f in store.list_active("user", "u")] == winners
    assert store.get(old).superseded_by == winners[0]  # type: ignore[union-attr]
    _assert_rows_match(raw, redis_prefix, "", "user", "u")


def test_deleting_a_subject_while_others_add_leaves_consistent_indexes(
    redis_url: str, redis_prefix: str
) -> None:
    raw = _raw(redis_url)
    store = RedisFactStore(redis_url, prefix=redis_prefix)
    for i in range(600):  # more than one delete step
        store.add(Fact(f"seed {i}", scope="user", scope_id="u"))

    def work(i: int) -> int:
        if i == 0:
            return store.delete("user", "u")
        return sum(store.add(Fact(f"w{i} {n}", scope="user", scope_id="u")) > 0 for n in range(60))

    _, errors = _race(4, work)
    assert not errors, errors
    _assert_rows_match(raw, redis_prefix, "", "user", "u")
    survivors = store.list_active("user", "u", limit=None)
    assert survivors == [store.get(f.id) for f in survivors]  # type: ignore[arg-type]
    assert all(f.fact.startswith("w") for f in survivors)  # every seed went
    hist = {int(i) for i in raw.smembers(f"{redis_prefix}:hist::user:u")}
    assert hist == {f.id for f in survivors}
    for fact in survivors:  # each survivor's text still dedupes to it
        assert store.add(Fact(fact.fact, scope="user", scope_id="u")) == fact.id


def test_a_large_subject_is_deleted_in_steps_and_leaves_no_keys(
    redis_url: str, redis_prefix: str
) -> None:
    """2,600 facts (history included) go in steps of DELETE_BATCH, each one
    script; the neighbour subject is untouched and no key of the subject is left."""
    raw = _raw(redis_url)
    store = RedisFactStore(redis_url, prefix=redis_prefix)
    keep = store.add(Fact("neighbour", scope="user", scope_id="v"))
    writer = raw.pipeline(transaction=False)
    for fact_id in range(keep + 1, keep + 2601):
        fact = Fact(f"fact {fact_id}", scope="user", scope_id="big", created_at=1000.0 + fact_id)
        store._queue_create(writer, fact_id, fact, f"fact {fact_id}")
    writer.set(f"{redis_prefix}:seq", keep + 2600)
    writer.execute()
    store.update(Fact("replacement", scope="user", scope_id="big"), keep + 1)
    assert store.delete("user", "big") == 2601
    assert not [k for k in raw.scan_iter(match=redis_prefix + ":*") if ":big" in k]
    assert raw.zcard(f"{redis_prefix}:all") == 1
    assert [f.id for f in store.list_active("user", "v")] == [keep]


def test_prune_learned_over_every_subject_keeps_the_newest_overall(
    redis_url: str, redis_prefix: str
) -> None:
    """``"*"`` prunes across the scope's subjects as one list, like the SQL stores."""
    store = RedisFactStore(redis_url, prefix=redis_prefix)
    ids = [
        store.add(
            Fact(
                f"learned {i}",
                scope="user",
                scope_id=f"u{i % 3}",
                source=SOURCE_CONVERSATION,
                created_at=1000.0 + i,
            )
        )
        for i in range(9)
    ]
    manual = store.add(Fact("manual", scope="user", scope_id="u0", created_at=1.0))
    assert store.prune_learned("user", "*", keep=4) == 5
    left = {f.id for f in store.list_active("user", "*", limit=None)}
    assert left == {*ids[-4:], manual}
