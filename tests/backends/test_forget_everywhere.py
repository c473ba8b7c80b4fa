"""Forget means gone: a plain Memory in another process removes every copy of a
user's words (facts, fact vectors, recalled messages, keyword postings, cached
embeddings, windows, summaries, traces) from the real SQLite file, Postgres and
Redis, and leaves the other user's untouched.

Process A (tests/backends/_forget_writer.py) writes with recall=, semantic=,
window_store="shared" and summarize=; process B is this test's ``Memory(location)``
built with nothing but the location.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from fastaiagent import Memory
from fastaiagent.trace.store import TraceStore

WRITER = Path(__file__).with_name("_forget_writer.py")
TURNS = 50

pytestmark = pytest.mark.subprocess


def write(location: str, user: str, marker: str, turns: int = TURNS) -> None:
    done = subprocess.run(
        [sys.executable, str(WRITER), location, user, marker, str(turns)],
        capture_output=True, text=True, timeout=300, cwd=WRITER.parent, env=dict(os.environ),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def holders(location: str, needle: str) -> list[str]:
    """Every table, file or key of the location (and the local trace store) that
    still holds ``needle``: in a row, a file page, a key name or a value."""
    found = _in_file(traces_db(), needle)
    if location.startswith("sqlite"):
        return found + _in_file(Path(urlsplit(location).path[1:]), needle)
    if location.startswith("postgres"):
        return found + _in_postgres(location, needle)
    return found + _in_redis(location, needle)


def _in_file(path: Path, needle: str) -> list[str]:
    out = []
    for part in (path, Path(f"{path}-wal"), Path(f"{path}-journal")):
        if part.exists() and needle.encode() in part.read_bytes():
            out.append(part.name)
    return out


def _in_postgres(location: str, needle: str) -> list[str]:
    import psycopg
    from psycopg import sql

    table = parse_qs(urlsplit(location).query)["table"][0]
    url = location.split("?")[0]
    out = []
    with psycopg.connect(url, autocommit=True) as conn:
        names = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND starts_with(tablename, %s)",
            (table,),
        ).fetchall()
        for (name,) in names:
            query = sql.SQL("SELECT count(*) FROM {} t WHERE t::text LIKE %s").format(sql.Identifier(name))
            row = conn.execute(query, (f"%{needle}%",)).fetchone()
            if row and row[0]:
                out.append(f"{name}: {row[0]} rows")
    return out


def _in_redis(location: str, needle: str) -> list[str]:
    import redis

    prefix = parse_qs(urlsplit(location).query)["prefix"][0]
    client = redis.Redis.from_url(location.split("?")[0])
    raw = needle.encode()
    out = []
    try:
        for key in client.scan_iter(match=prefix + "*", count=1000):
            kind = client.type(key).decode()
            if kind == "string":
                values = [client.get(key) or b""]
            elif kind == "hash":
                values = [k + b"=" + v for k, v in client.hgetall(key).items()]
            elif kind in ("set",):
                values = list(client.smembers(key))
            elif kind == "zset":
                values = list(client.zrange(key, 0, -1))
            elif kind == "list":
                values = list(client.lrange(key, 0, -1))
            else:
                values = [repr(client.xrange(key)).encode()] if kind == "stream" else []
            if raw in key or any(raw in v for v in values):
                out.append(key.decode(errors="replace"))
    finally:
        client.close()
    return out


def traces_db() -> Path:
    """The default local trace store of this test (beside its local database)."""
    return Path(os.environ["FASTAIAGENT_LOCAL_DB"]).with_name("traces.db")


def forget_audit() -> dict[str, Any]:
    """The attributes of the one forget audit line in the local trace store."""
    store = TraceStore(traces_db())
    try:
        runs = [r for r in store.list_runs(limit=100) if r.name == "memory.forget.audit"]
        assert len(runs) == 1, runs
        (span,) = store.get_trace(runs[0].trace_id)
        return dict(span.attributes)
    finally:
        store.close()


def forget_through(door: str, location: str, user: str, tmp_path: Path) -> None:
    """Forget ``user`` the way each door does: Python, the CLI, MCP, the Memory page."""
    if door == "python":
        assert Memory(location).forget(tier="user", id=user) == 1  # nothing configured but the location
    elif door == "cli":
        done = subprocess.run(
            [sys.executable, "-m", "fastaiagent.cli", "memory", "forget", "--user", user, "--yes",
             "--location", location],
            capture_output=True, text=True, timeout=120, env=dict(os.environ),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    elif door == "mcp":
        import anyio

        from _mcp_client import call, cli_args, stdio_session

        async def scenario() -> None:
            async with stdio_session(cli_args("--location", location, "--user", user), str(tmp_path)) as session:
                assert (await call(session, "forget", everything=True))["deleted"] == 1

        anyio.run(scenario)
    else:
        import re

        from fastapi.testclient import TestClient

        from fastaiagent.ui.app import create_app

        with TestClient(create_app(location), base_url="http://127.0.0.1") as client:
            page = client.get("/memory", params={"scope": f"user:{user}"}).text
            csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
            assert csrf is not None
            done = client.post(
                f"/memory/users/{user}/forget", data={"csrf": csrf.group(1), "confirm": user},
                follow_redirects=False,
            )  # fmt: skip
            assert done.status_code == 303, done.text[-500:]


@pytest.mark.parametrize("door", ["python", "cli", "mcp", "ui"])
def test_a_plain_memory_in_another_process_forgets_every_copy(
    any_location: str, door: str, tmp_path: Path
) -> None:
    location = any_location
    sqlite3.connect(traces_db()).close()  # a user who keeps local traces: the audit goes there
    carol, dave = f"carol{uuid.uuid4().hex[:6]}", f"dave{uuid.uuid4().hex[:6]}"
    gone, kept = f"quokka{uuid.uuid4().hex[:8]}", f"wombat{uuid.uuid4().hex[:8]}"
    write(location, carol, gone)
    write(location, dave, kept, turns=5)
    assert holders(location, gone), "the writer left nothing to forget: the test proves nothing"

    forget_through(door, location, carol, tmp_path)

    assert holders(location, gone) == []
    assert holders(location, carol) == []  # not even the id, in a key, a row or a file
    assert holders(location, kept), "the other user's memory must stay"
    audit = forget_audit()
    assert audit["memory.deleted.recall"] == TURNS and audit["memory.deleted.facts"] == 1
    assert audit["memory.deleted.fact_vectors"] == 1 and audit["memory.deleted.windows"] == 1
    assert audit["memory.subject"].startswith("sha256:") and audit["audit.by"]
    survivor = Memory(location, user_id=dave)
    assert [f.fact for f in survivor.retrieve(tier="user")] == [f"{dave} secret is {kept}fact"]
