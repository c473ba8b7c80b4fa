"""The suite leaves shared places as it found them.

Before the run it takes a snapshot of what a real user of this machine's
servers and working folder owns: the default Postgres table ``learned_memory``
(its companion tables, the default item table ``namespaced_items``, their
schema-version rows), the Redis keys under the
default prefix ``fastaiagent`` and the files of ``./.fastaiagent``. After the run
it takes another; any difference fails the run and names what changed. Tests
own their state (a table, key prefix or file of their own), so there is none.

Only the controlling process checks (with pytest-xdist the workers do not).
To find the test that did it, set ``FASTAIAGENT_GUARD_EACH_TEST=1``: every test
is then checked on its own (slow; one process, ``-n 0``, is clearest). An
unreachable server is left out of the snapshot, not failed: the backend tests
themselves fail under CI=true when their server is missing.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _env import POSTGRES_URL, REDIS_URL

DEFAULT_TABLE = "learned_memory"
DEFAULT_ITEMS_TABLE = "namespaced_items"  # what a store on the default table keeps items in
DEFAULT_PREFIX = "fastaiagent"
# Past this many default keys only their names are compared (a big real data set).
MAX_DUMPED_KEYS = 5_000


def _postgres() -> Any:
    try:
        import psycopg
    except ImportError:
        return None
    try:
        conn = psycopg.connect(POSTGRES_URL, connect_timeout=3, autocommit=True)
    except Exception:
        return None
    with conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                "AND (tablename IN (%s, %s) OR tablename LIKE %s) ORDER BY tablename",
                (DEFAULT_TABLE, DEFAULT_ITEMS_TABLE, DEFAULT_TABLE + r"\_%"),
            )
        ]
        state: dict[str, Any] = {}
        for table in tables:
            # The row count and newest transaction id change with any insert,
            # update or delete.
            row = conn.execute(
                f'SELECT count(*), coalesce(max(xmin::text::bigint), 0) FROM "{table}"'
            ).fetchone()
            state[table] = tuple(row) if row else None
        # The version table is shared by every test's tables: only the default's rows count.
        if conn.execute("SELECT to_regclass('fastaiagent_schema')").fetchone()[0]:  # type: ignore[index]
            versions = conn.execute(
                "SELECT component, version FROM fastaiagent_schema "
                "WHERE component LIKE %s OR component LIKE %s ORDER BY component",
                (f"%:{DEFAULT_TABLE}%", f"%:{DEFAULT_ITEMS_TABLE}%"),
            ).fetchall()
            if versions:
                state["fastaiagent_schema"] = versions
        return state


def _redis() -> Any:
    try:
        import redis
    except ImportError:
        return None
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        keys = sorted(set(client.scan_iter(match=DEFAULT_PREFIX + ":*", count=1000)))  # may repeat
        if len(keys) > MAX_DUMPED_KEYS:
            return keys
        return {key: hashlib.sha1(client.dump(key) or b"").hexdigest() for key in keys}
    except Exception:
        return None
    finally:
        client.close()


def _files(folders: list[Path]) -> dict[str, tuple[int, int]]:
    seen: dict[str, tuple[int, int]] = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
            if path.is_file():
                stat = path.stat()
                seen[str(path)] = (stat.st_size, stat.st_mtime_ns)
        if folder.exists() and not folder.is_dir():
            seen[str(folder)] = (folder.stat().st_size, folder.stat().st_mtime_ns)
    return seen


def _snapshot(config: pytest.Config) -> dict[str, Any]:
    folders = sorted({Path.cwd() / ".fastaiagent", Path(config.rootpath) / ".fastaiagent"})
    return {
        f"Postgres table {DEFAULT_TABLE}": _postgres(),
        f"Redis keys {DEFAULT_PREFIX}:*": _redis(),
        "./.fastaiagent files": _files(folders),
    }


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Take the snapshot before any test runs."""
    if not _is_worker(session.config):
        session.config.stash[_BEFORE] = _snapshot(session.config)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Compare with the snapshot; a difference fails the run."""
    config = session.config
    if _is_worker(config) or _BEFORE not in config.stash:
        return
    before, after = config.stash[_BEFORE], _snapshot(config)
    changed = [
        name
        for name, was in before.items()
        if was is not None and after.get(name) is not None and after[name] != was
    ]
    if not changed:
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "the run touched a default location", red=True, bold=True)
        for name in changed:
            reporter.write_line(f"{name} changed: tests must use a table, prefix or file of their own")
            reporter.write_line(f"  before: {_short(before[name])}")
            reporter.write_line(f"  after:  {_short(after[name])}")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _guard_each_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """With FASTAIAGENT_GUARD_EACH_TEST=1, fail the test that touched a default location."""
    if os.environ.get("FASTAIAGENT_GUARD_EACH_TEST") != "1":
        yield
        return
    before = _snapshot(request.config)
    yield
    after = _snapshot(request.config)
    changed = [n for n, was in before.items() if None not in (was, after.get(n)) and after[n] != was]
    if changed:
        pytest.fail(f"this test touched a default location: {', '.join(changed)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 600 else text[:600] + "..."


_BEFORE = pytest.StashKey[dict[str, Any]]()
