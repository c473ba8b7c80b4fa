"""The upgrade to the two times of a fact, from today's layout, on every backend.

Each test writes a store in the layout before validity existed (SQLite schema
version 2, Postgres version 2, Redis layout 5), key by key or statement by
statement, with a superseded fact in it; opening it with this code records the
new version once, fills ``superseded_at`` of history from the replacement's
``created_at``, and then validity, ``as of`` reads, history and pruning work on
the old rows as on new ones.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from _env import require_module
from fastaiagent._schema import VERSION_TABLE
from fastaiagent.facts.fact import Fact
from fastaiagent.facts.sqlite.store import FACTS_SCHEMA, SQLiteFactStore
from fastaiagent.facts.timeline import versions

T0 = 1_700_000_000.0


def _check_upgraded(store: Any) -> None:
    """What every upgraded store holds: fact 1 (T0) superseded by fact 2 (T0 + 100)."""
    old = store.get(1)
    assert old is not None and (old.superseded_by, old.superseded_at) == (2, T0 + 100)
    assert [f.fact for f in store.list_as_of("user", "alice", "", T0 + 50)] == ["Lives in Paris"]
    assert [f.fact for f in store.list_as_of("user", "alice", "", T0 + 150)] == ["Lives in Berlin"]
    assert [f.id for f in versions(store, 1)] == [2, 1]
    assert [f.fact for f in store.list_active("user", "bob", now=T0)] == ["Bob's fact"]
    ending = store.add(Fact("Promo", scope="user", scope_id="alice", created_at=T0 + 200, valid_to=T0 + 300))
    assert [f.id for f in store.list_active("user", "alice", now=T0 + 250)] == [ending, 2]
    assert [f.id for f in store.list_active("user", "alice", now=T0 + 300)] == [2]
    assert store.prune_history(T0 + 400) == 2  # the superseded fact and the expired one
    assert store.get(1) is None and store.get(ending) is None
    assert [f.fact for f in store.list_active("user", "alice", now=T0 + 400)] == ["Lives in Berlin"]


# -- SQLite: version 2 ---------------------------------------------------------


def test_a_version_2_sqlite_file_gets_the_two_times(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    conn = sqlite3.connect(path)
    for step in FACTS_SCHEMA.steps[:2]:  # the layout before this version, verbatim
        assert isinstance(step, str)
        conn.executescript(step)
    conn.execute(f"CREATE TABLE {VERSION_TABLE} (component TEXT PRIMARY KEY, version INTEGER NOT NULL)")
    conn.execute(f"INSERT INTO {VERSION_TABLE} VALUES (?, 2)", (FACTS_SCHEMA.component,))
    for text, who, at, by in [
        ("Lives in Paris", "alice", T0, 2),
        ("Lives in Berlin", "alice", T0 + 100, None),
        ("Bob's fact", "bob", T0, None),
    ]:
        conn.execute(
            "INSERT INTO learned_memory (fact, fact_key, scope, scope_id, created_at, superseded_by) "
            "VALUES (?, lower(?), 'user', ?, ?, ?)",
            (text, text, who, at, by),
        )
    conn.commit()
    conn.close()
    store = SQLiteFactStore(path)
    _check_upgraded(store)
    check = sqlite3.connect(path)
    assert check.execute(f"SELECT version FROM {VERSION_TABLE}").fetchall() == [(4,)]
    indexes = {r[0] for r in check.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"idx_learned_memory_subject_live", "idx_learned_memory_expiry"} <= indexes
    assert {"idx_learned_memory_subject_texts"} <= indexes  # version 4: one index for two
    # replaced, not kept beside
    assert not {"idx_learned_memory_subject_read", "idx_learned_memory_text_all"} & indexes
    check.close()
    store.close()


# -- Postgres: version 2 -------------------------------------------------------


@pytest.mark.postgres
def test_a_version_2_postgres_table_gets_the_two_times(postgres_url: str, pg_table: str) -> None:
    psycopg = require_module("psycopg")
    from fastaiagent.facts.postgres.schema import index_names
    from fastaiagent.facts.postgres.store import PostgresFactStore

    names = index_names(pg_table)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            f"CREATE TABLE {pg_table} (id BIGSERIAL PRIMARY KEY, fact TEXT NOT NULL, "
            "fact_key TEXT NOT NULL, scope TEXT NOT NULL, scope_id TEXT NOT NULL DEFAULT '', "
            "project_id TEXT NOT NULL DEFAULT '', confidence DOUBLE PRECISION NOT NULL DEFAULT 1.0, "
            "source TEXT NOT NULL DEFAULT 'manual', source_trace_id TEXT, "
            "created_at DOUBLE PRECISION NOT NULL, superseded_by BIGINT, "
            "metadata JSONB NOT NULL DEFAULT '{}'::jsonb)"
        )
        for kind, columns in (
            ("subject_active", "(scope, scope_id, project_id, created_at DESC) WHERE superseded_by IS NULL"),
            ("scope_active", "(scope, project_id, created_at DESC) WHERE superseded_by IS NULL"),
            ("active_key", "(scope, scope_id, project_id, md5(fact_key)) WHERE superseded_by IS NULL"),
            ("subject_all", "(scope, scope_id, project_id)"),
            ("text_all", "(md5(fact_key), scope, project_id, scope_id)"),
        ):
            unique = "UNIQUE " if kind == "active_key" else ""
            admin.execute(f"CREATE {unique}INDEX {names[kind]} ON {pg_table} {columns}")
        admin.execute(
            "CREATE TABLE IF NOT EXISTS fastaiagent_schema "
            "(component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
        )
        admin.execute("INSERT INTO fastaiagent_schema VALUES (%s, 2)", (f"facts:{pg_table}",))
        for text, who, at, by in [
            ("Lives in Paris", "alice", T0, 2),
            ("Lives in Berlin", "alice", T0 + 100, None),
            ("Bob's fact", "bob", T0, None),
        ]:
            admin.execute(
                f"INSERT INTO {pg_table} (fact, fact_key, scope, scope_id, created_at, superseded_by) "
                "VALUES (%s, lower(%s), 'user', %s, %s, %s)",
                (text, text, who, at, by),
            )
    store = PostgresFactStore(postgres_url, table=pg_table)
    _check_upgraded(store)
    with psycopg.connect(postgres_url) as admin:
        version = admin.execute(
            "SELECT version FROM fastaiagent_schema WHERE component = %s", (f"facts:{pg_table}",)
        ).fetchone()
        valid = {
            r[0]
            for r in admin.execute(
                "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE i.indrelid = %s::regclass AND i.indisvalid",
                (pg_table,),
            )
        }
    assert version == (3,)
    assert set(names.values()) <= valid
    store.close()


# -- Redis: layout 5 -----------------------------------------------------------


def _layout5_fact(raw: Any, prefix: str, fact_id: int, text: str, who: str, at: float) -> None:
    """One fact exactly as the layout-5 store wrote it (hash, content key, indexes)."""
    key = " ".join(text.split()).casefold()
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]
    subject, member = f":user:{who}", str(fact_id).zfill(20)  # project "", scope, id
    row = json.dumps([text, "user", who, "", 1.0, "manual", None, {}, fact_id, at], separators=(",", ":"))
    fields = {
        "fact": text, "fact_key": key, "digest": digest, "scope": "user", "scope_id": who,
        "project_id": "", "confidence": "1.0", "source": "manual", "source_trace_id": "",
        "created_at": repr(at), "superseded_by": "", "metadata": "{}", "row": row,
    }  # fmt: skip
    pipe = raw.pipeline(transaction=True)
    pipe.hset(f"{prefix}:fact:{fact_id}", mapping=fields)
    pipe.set(f"{prefix}:key:{subject}:{digest}", fact_id)
    pipe.zadd(f"{prefix}:active:{subject}", {member: at})
    pipe.zadd(f"{prefix}:rows:{subject}", {member + row: at})
    pipe.zadd(f"{prefix}:scope::user", {member: at})
    pipe.zadd(f"{prefix}:all", {member: at})
    pipe.sadd(f"{prefix}:hist:{subject}", fact_id)
    pipe.sadd(f"{prefix}:subjects", subject)
    pipe.set(f"{prefix}:seq", fact_id)
    pipe.execute()


def _layout5_supersede(raw: Any, prefix: str, old: int, new: int) -> None:
    stored = raw.hgetall(f"{prefix}:fact:{old}")
    subject, member = f":user:{stored['scope_id']}", str(old).zfill(20)
    pipe = raw.pipeline(transaction=True)
    pipe.hset(f"{prefix}:fact:{old}", "superseded_by", new)
    pipe.sadd(f"{prefix}:old:{subject}:{stored['digest']}", old)
    pipe.zrem(f"{prefix}:active:{subject}", member)
    pipe.zrem(f"{prefix}:rows:{subject}", member + stored["row"])
    pipe.zrem(f"{prefix}:scope::user", member)
    pipe.delete(f"{prefix}:key:{subject}:{stored['digest']}")
    pipe.execute()


@pytest.mark.redis
def test_a_layout_5_redis_namespace_gets_the_two_times(redis_url: str, redis_prefix: str) -> None:
    redis = require_module("redis")
    from fastaiagent.facts.redis.store import LAYOUT_VERSION, RedisFactStore

    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    _layout5_fact(raw, redis_prefix, 1, "Lives in Paris", "alice", T0)
    _layout5_fact(raw, redis_prefix, 2, "Lives in Berlin", "alice", T0 + 100)
    _layout5_supersede(raw, redis_prefix, 1, 2)
    _layout5_fact(raw, redis_prefix, 3, "Bob's fact", "bob", T0)
    raw.set(f"{redis_prefix}:layout", "5")
    store = RedisFactStore(redis_url, prefix=redis_prefix)
    _check_upgraded(store)
    assert raw.get(f"{redis_prefix}:layout") == LAYOUT_VERSION == "6"
    raw.close()
    store.close()
