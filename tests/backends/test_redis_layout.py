"""RedisFactStore layouts, script cache and error classes, on the real Redis.

- A namespace written by an older release (layout 3) opens, reads back in
  full and is upgraded to the current layout; its facts then update and
  delete cleanly. The layout-3 writes are replicated here key by key (as
  ``git show ab594ca:src/fastaiagent/learn/redis.py`` wrote them), not through
  the store; layout 4 wrote the same keys plus each hash's ``digest``.
- A layout-4 namespace gets the ``old:`` sets of superseded ids per text, so
  ``delete(fact=)`` then removes a text's history too.
- A newer layout is refused with SchemaVersionError and left untouched.
- SCRIPT FLUSH (what a restart does to the script cache) is survived.
- Outages are StoreUnavailableError, told apart by redis-py's exception type.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
from typing import Any

import pytest

from _env import require_module
from fastaiagent.errors import SchemaVersionError, StoreConfigError, StoreUnavailableError
from fastaiagent.learn import SOURCE_CONVERSATION, Fact

pytestmark = pytest.mark.redis
redis = require_module("redis")  # a missing driver fails under CI=true

from fastaiagent.facts.redis.layout import escape_part  # noqa: E402
from fastaiagent.facts.redis.store import LAYOUT_VERSION, RedisFactStore  # noqa: E402
from fastaiagent.facts.redis.windows import RedisWindowStore  # noqa: E402
from fastaiagent.facts.windows import WindowKey  # noqa: E402

BASE = 1_700_000_000.0


def _raw(url: str) -> Any:
    return redis.Redis.from_url(url, decode_responses=True)


def _keys(raw: Any, prefix: str) -> set[str]:
    return set(raw.scan_iter(match=prefix + ":*", count=1000))


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


class _Layout3Writer:
    """Writes facts exactly as the layout-3 store did: the hash (no ``digest``
    field), content key, active / rows / scope / all indexes, history, subjects."""

    def __init__(self, raw: Any, prefix: str) -> None:
        self.raw, self.prefix = raw, prefix
        self.rows: dict[int, tuple[str, str, str, str]] = {}

    def subject(self, scope: str, scope_id: str, project: str) -> str:
        return ":".join(escape_part(p) for p in (project, scope, scope_id))

    def content_key(self, scope: str, scope_id: str, project: str, text: str) -> str:
        digest = hashlib.sha256(_norm(text).encode("utf-8")).hexdigest()[:32]
        return f"{self.prefix}:key:{self.subject(scope, scope_id, project)}:{digest}"

    def add(
        self, fact_id: int, text: str, scope: str, scope_id: str, project: str = "", **kw: Any
    ) -> None:
        source = kw.get("source", "manual")
        created = BASE + fact_id
        row = json.dumps(
            [text, scope, scope_id, project, 1.0, source, None, {}, fact_id, created],
            separators=(",", ":"),
        )
        fields = {
            "fact": text,
            "fact_key": _norm(text),
            "scope": scope,
            "scope_id": scope_id,
            "project_id": project,
            "confidence": repr(1.0),
            "source": source,
            "source_trace_id": "",
            "created_at": repr(created),
            "superseded_by": "",
            "metadata": json.dumps({}),
            "row": row,
        }
        subject, member, p = (
            self.subject(scope, scope_id, project),
            str(fact_id).zfill(20),
            self.prefix,
        )
        pipe = self.raw.pipeline(transaction=True)
        pipe.hset(f"{p}:fact:{fact_id}", mapping=fields)
        pipe.set(self.content_key(scope, scope_id, project, text), fact_id)
        pipe.zadd(f"{p}:active:{subject}", {member: created})
        pipe.zadd(f"{p}:rows:{subject}", {member + row: created})
        pipe.zadd(f"{p}:scope:{escape_part(project)}:{scope}", {member: created})
        pipe.zadd(f"{p}:all", {member: created})
        pipe.sadd(f"{p}:hist:{subject}", fact_id)
        pipe.sadd(f"{p}:subjects", subject)
        pipe.incr(f"{p}:seq")
        pipe.execute()
        self.rows[fact_id] = (text, scope, scope_id, project)

    def supersede(self, old: int, new: int) -> None:
        text, scope, scope_id, project = self.rows[old]
        subject, member, p = self.subject(scope, scope_id, project), str(old).zfill(20), self.prefix
        row = self.raw.hget(f"{p}:fact:{old}", "row")
        pipe = self.raw.pipeline(transaction=True)
        pipe.hset(f"{p}:fact:{old}", "superseded_by", new)
        pipe.zrem(f"{p}:active:{subject}", member)
        pipe.zrem(f"{p}:rows:{subject}", member + row)
        pipe.zrem(f"{p}:scope:{escape_part(project)}:{scope}", member)
        pipe.delete(self.content_key(scope, scope_id, project, text))
        pipe.execute()


def test_a_layout_3_namespace_opens_reads_back_and_upgrades(
    redis_url: str, redis_prefix: str
) -> None:
    raw = _raw(redis_url)
    old = _Layout3Writer(raw, redis_prefix)
    old.add(1, "Prefers email", "user", "alice")
    old.add(2, "Prefers Slack", "user", "alice")
    old.supersede(1, 2)
    old.add(3, "Lives in Paris", "user", "alice", source=SOURCE_CONVERSATION)
    old.add(4, "Bob fact", "user", "bob:x", "p:1")
    old.add(5, "Global truth", "agent", "support")
    raw.set(f"{redis_prefix}:layout", "3")

    store = RedisFactStore(redis_url, prefix=redis_prefix)
    alice = store.list_active("user", "alice")
    assert [(f.id, f.fact) for f in alice] == [(3, "Lives in Paris"), (2, "Prefers Slack")]
    assert alice[0].source == SOURCE_CONVERSATION and alice[0].created_at == BASE + 3
    assert store.get(1).superseded_by == 2  # type: ignore[union-attr]
    assert [f.fact for f in store.list_active("user", "bob:x", "p:1")] == ["Bob fact"]
    assert [f.fact for f in store.list_active("agent", "")] == ["Global truth"]
    assert [f.id for f in store.browse(include_superseded=True)] == [5, 4, 3, 2, 1]
    counts = {
        (s.scope, s.scope_id, s.project_id): s.count
        for s in store.subjects(include_superseded=True)
    }
    assert counts == {
        ("user", "alice", ""): 3,
        ("user", "bob:x", "p:1"): 1,
        ("agent", "support", ""): 1,
    }

    # Upgraded: the layout is recorded and every hash names its content key.
    assert raw.get(f"{redis_prefix}:layout") == LAYOUT_VERSION == "6"
    for fact_id in range(1, 6):
        stored = raw.hgetall(f"{redis_prefix}:fact:{fact_id}")
        assert stored["digest"] == hashlib.sha256(stored["fact_key"].encode()).hexdigest()[:32]

    # The upgraded facts behave like new ones.
    assert store.add(Fact("prefers  SLACK", scope="user", scope_id="alice")) == 2
    assert store.add(Fact("Prefers email", scope="user", scope_id="alice")) == 6
    assert store.update(Fact("Lives in Lyon", scope="user", scope_id="alice"), 3) == 7
    assert not raw.exists(old.content_key("user", "alice", "", "Lives in Paris"))
    assert store.delete("user", "alice") == 5
    assert not [k for k in _keys(raw, redis_prefix) if ":user:alice" in k]
    assert store.delete("user", "bob:x", "p:1") == 1
    assert store.delete("agent", "support") == 1
    assert _keys(raw, redis_prefix) == {f"{redis_prefix}:seq", f"{redis_prefix}:layout"}


class _Layout4Writer(_Layout3Writer):
    """Layout 4's writes: layout 3's keys plus the hash's ``digest`` field; a
    superseded fact was recorded in no per-text set."""

    def add(
        self, fact_id: int, text: str, scope: str, scope_id: str, project: str = "", **kw: Any
    ) -> None:
        super().add(fact_id, text, scope, scope_id, project, **kw)
        digest = hashlib.sha256(_norm(text).encode("utf-8")).hexdigest()[:32]
        self.raw.hset(f"{self.prefix}:fact:{fact_id}", "digest", digest)


def test_a_layout_4_namespace_gets_the_history_sets_and_forgets_a_text_wholly(
    redis_url: str, redis_prefix: str
) -> None:
    raw = _raw(redis_url)
    old = _Layout4Writer(raw, redis_prefix)
    old.add(1, "My card is 4111", "user", "alice")
    old.add(2, "Card ends 5555", "user", "alice")
    old.supersede(1, 2)
    old.add(3, "my card is  4111", "user", "alice")  # active again
    old.add(4, "My card is 4111", "user", "bob")
    raw.set(f"{redis_prefix}:layout", "4")
    assert not [k for k in _keys(raw, redis_prefix) if ":old:" in k]

    store = RedisFactStore(redis_url, prefix=redis_prefix)
    assert [f.id for f in store.list_active("user", "alice")] == [3, 2]
    assert raw.get(f"{redis_prefix}:layout") == LAYOUT_VERSION
    assert [raw.smembers(k) for k in _keys(raw, redis_prefix) if ":old:" in k] == [{"1"}]
    assert store.delete("user", "alice", fact="MY CARD is 4111") == 2
    assert store.get(1) is None and store.get(3) is None
    assert [f.fact for f in store.list_active("user", "alice")] == ["Card ends 5555"]
    assert [f.fact for f in store.list_active("user", "bob")] == ["My card is 4111"]
    assert not [k for k in _keys(raw, redis_prefix) if ":old:" in k]


def test_reindex_brings_an_old_writers_later_facts_to_the_layout(
    redis_url: str, redis_prefix: str
) -> None:
    raw = _raw(redis_url)
    store = RedisFactStore(redis_url, prefix=redis_prefix)
    first = store.add(Fact("new-style fact", scope="user", scope_id="u"))
    _Layout3Writer(raw, redis_prefix).add(first + 1, "old-style fact", "user", "u")
    assert not raw.hexists(f"{redis_prefix}:fact:{first + 1}", "digest")
    assert store.reindex() == 2
    assert raw.hexists(f"{redis_prefix}:fact:{first + 1}", "digest")
    assert store.delete("user", "u", fact="OLD-style fact") == 1
    assert [f.fact for f in store.list_active("user", "u")] == ["new-style fact"]
    assert not [
        k for k in _keys(raw, redis_prefix) if ":key:" in k and raw.get(k) == str(first + 1)
    ]


@pytest.mark.parametrize("found", [str(int(LAYOUT_VERSION) + 1), "banana"])
def test_a_newer_layout_is_refused_and_left_alone(
    redis_url: str, redis_prefix: str, found: str
) -> None:
    raw = _raw(redis_url)
    raw.set(f"{redis_prefix}:layout", found)
    store = RedisFactStore(redis_url, prefix=redis_prefix)
    with pytest.raises(
        SchemaVersionError, match=rf"knows layouts up to {LAYOUT_VERSION}.*pip install -U fastaiagent"
    ):
        store.list_active("user", "u")
    with pytest.raises(SchemaVersionError, match="newer fastaiagent"):
        store.add(Fact("x", scope="user", scope_id="u"))
    with pytest.raises(SchemaVersionError, match="newer fastaiagent"):
        store.reindex()
    assert _keys(raw, redis_prefix) == {f"{redis_prefix}:layout"}
    assert raw.get(f"{redis_prefix}:layout") == found


def test_every_write_survives_a_flushed_script_cache(own_redis_url: str, redis_prefix: str) -> None:
    """A restarted (or SCRIPT FLUSHed) server has no scripts: each call loads its
    script again (NOSCRIPT -> SCRIPT LOAD -> EVALSHA). SCRIPT FLUSH empties the
    whole server's cache, so this runs on a server of the test's own."""
    raw = _raw(own_redis_url)
    store = RedisFactStore(own_redis_url, prefix=redis_prefix)
    windows = RedisWindowStore(store)
    a = store.add(Fact("A", scope="user", scope_id="u", source=SOURCE_CONVERSATION))
    version = windows.save(WindowKey("agent", "", "u"), "{}", None, None)
    raw.script_flush()
    assert windows.load(WindowKey("agent", "", "u")) == (version, "{}")
    b = store.add(Fact("B", scope="user", scope_id="u", source=SOURCE_CONVERSATION))
    c = store.update(Fact("C", scope="user", scope_id="u", source=SOURCE_CONVERSATION), a)
    store.supersede(b, c)
    assert [f.id for f in store.list_active("user", "*")] == [c]
    assert store.prune_learned("user", "u", keep=0) == 1
    store.add(Fact("D", scope="user", scope_id="u"))
    assert store.delete("user", "u", fact="d") == 1
    assert store.delete("user", "u") == 2  # a and b, superseded
    assert _keys(raw, redis_prefix) - {f"{redis_prefix}:win:agent::u"} == {
        f"{redis_prefix}:seq",
        f"{redis_prefix}:layout",
    }


def test_wrong_credentials_are_a_config_error_naming_the_fix(redis_url: str) -> None:
    rest = redis_url.split("://", 1)[1]
    store = RedisFactStore(f"redis://nobody:wrong@{rest}", prefix="never-written")
    with pytest.raises(StoreConfigError, match="check the user and password") as info:
        store.add(Fact("x", scope="user", scope_id="u"))
    assert isinstance(info.value.__cause__, redis.exceptions.AuthenticationError)
    store.close()


def test_a_server_that_stops_answering_is_store_unavailable() -> None:
    """A peer that accepts the connection and never replies: a redis-py
    TimeoutError, reported as StoreUnavailableError for facts and windows."""
    silent = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    port = silent.getsockname()[1]
    store = RedisFactStore(f"redis://127.0.0.1:{port}/0", prefix="silent", socket_timeout=0.3)
    try:
        with pytest.raises(StoreUnavailableError, match="cannot reach Redis for the fact store"):
            store.list_active("user", "u")
        windows = RedisWindowStore(store)
        with pytest.raises(StoreUnavailableError, match="cannot reach Redis for the window store"):
            windows.load(WindowKey("agent", "", "u"))
    finally:
        stop.set()
        silent.close()
        for conn in held:
            conn.close()
        store.close()
