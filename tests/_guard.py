"""The suite leaves shared places as it found them.

Two checks:

- **Default locations.** Before the run a snapshot is taken of what a real user
  of this machine's servers and working folder owns: the default Postgres table
  ``learned_memory`` (its companion tables, the default item table
  ``namespaced_items``, their schema-version rows), the Redis keys under the
  default prefix ``fastaiagent`` and the files of ``./.fastaiagent``. After the
  run it takes another; any difference fails the run and names what changed.
- **Leftovers.** Every table name and key prefix a test makes comes from
  ``_env.unique_name`` (``fa_<kind>_<run id>_<random>``). After each test (its
  fixtures torn down) whatever still exists under a name it made, in the test
  Postgres (tables, indexes, sequences, functions, schema-version rows) or the
  test Redis (keys), fails that test, naming it, and is removed. At the end of
  the run anything named with the run's id fails the run (what a process the
  test started, or a background thread, left after its test). The run id is
  this run's own, so a concurrent run's tables and keys are never counted; a
  pytest session a test starts shares it but leaves this check to the run
  that owns it (its other tests may still be using their tables).

Only the controlling process checks the run (with pytest-xdist the workers do
not; they check their tests). To find the test that touched a default location,
set ``FASTAIAGENT_GUARD_EACH_TEST=1``: every test is then checked on its own
(slow; one process, ``-n 0``, is clearest). An unreachable server is left out,
not failed: the backend tests themselves fail under CI=true when their server
is missing.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import _env
from _env import POSTGRES_URL, REDIS_URL, RUN_ID, RUN_OWNER

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


def pytest_report_header(config: pytest.Config) -> str:
    """The run id, which every table and key prefix of this run carries."""
    return f"test run id: {RUN_ID} (in every test table and key prefix: fa_<kind>_{RUN_ID}_...)"


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
    # Anything named with this run's id: a test's leftovers its own check missed.
    left = leftovers([f"_{RUN_ID}_"]) if RUN_OWNER else []
    if not changed and not left:
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and changed:
        reporter.write_sep("=", "the run touched a default location", red=True, bold=True)
        for name in changed:
            reporter.write_line(f"{name} changed: tests must use a table, prefix or file of their own")
            reporter.write_line(f"  before: {_short(before[name])}")
            reporter.write_line(f"  after:  {_short(after[name])}")
    if reporter is not None and left:
        reporter.write_sep("=", f"the run (id {RUN_ID}) left tables or keys behind", red=True, bold=True)
        reporter.write_line(f"now removed: {_short(left)}")
    remove(left)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _guard_each_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test that left tables or keys under a name it made (see the module
    doc); with FASTAIAGENT_GUARD_EACH_TEST=1, also the test that touched a default
    location. Autouse, so torn down after the test's other fixtures."""
    made = len(_env.CREATED)
    each = os.environ.get("FASTAIAGENT_GUARD_EACH_TEST") == "1"
    before = _snapshot(request.config) if each else None
    yield
    names = _env.CREATED[made:]
    left = leftovers(names) if names else []
    if left:
        remove(left)
        pytest.fail(f"this test left behind (now removed): {_short(left)}", pytrace=False)
    if before is not None:
        after = _snapshot(request.config)
        changed = [n for n, was in before.items() if None not in (was, after.get(n)) and after[n] != was]
        if changed:
            pytest.fail(f"this test touched a default location: {', '.join(changed)}")


# -- leftovers ---------------------------------------------------------------------

_servers: dict[str, Any] = {}  # this process's connections for the checks


def _pg_connection() -> Any:
    """A Postgres connection of the guard's own (None: no server or driver)."""
    conn = _servers.get("postgres")
    if conn is not None and not conn.closed:
        return conn
    try:
        import psycopg

        conn = _servers["postgres"] = psycopg.connect(POSTGRES_URL, connect_timeout=3, autocommit=True)
    except Exception:
        return None
    return conn


def _redis_client() -> Any:
    if "redis" not in _servers:
        try:
            import redis
        except ImportError:
            return None
        _servers["redis"] = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3, decode_responses=True)
    return _servers["redis"]


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%") + "%"


def leftovers(names: list[str]) -> list[str]:
    """What exists under any of ``names`` (a name anywhere in a Postgres relation,
    function or schema-version row, or in a Redis key), each as ``"<kind> <name>"``."""
    found: list[str] = []
    conn = _pg_connection()
    if conn is not None:
        patterns = [_like(name) for name in names]
        try:
            found += [
                f"{kind} {name}"
                for kind, name in conn.execute(
                    "SELECT CASE c.relkind WHEN 'S' THEN 'sequence' WHEN 'i' THEN 'index' "
                    "ELSE 'table' END, c.relname FROM pg_class c JOIN pg_namespace n "
                    "ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relname LIKE ANY(%s) "
                    "UNION ALL SELECT 'function', p.proname FROM pg_proc p JOIN pg_namespace n "
                    "ON n.oid = p.pronamespace WHERE n.nspname = 'public' AND p.proname LIKE ANY(%s)",
                    (patterns, patterns),
                ).fetchall()
            ]
            if conn.execute("SELECT to_regclass('fastaiagent_schema')").fetchone()[0]:
                found += [
                    f"version {row[0]}"
                    for row in conn.execute(
                        "SELECT component FROM fastaiagent_schema WHERE component LIKE ANY(%s)",
                        (patterns,),
                    ).fetchall()
                ]
        except Exception:
            _servers.pop("postgres", None)
    client = _redis_client()
    if client is not None:
        try:
            for name in names:
                keys = client.scan_iter(match=f"*{name}*", count=1000)
                found += [f"key {key}" for key in sorted(set(keys))]  # SCAN may repeat a key
        except Exception:
            pass
    return found


def remove(found: list[str]) -> None:
    """Drop what :func:`leftovers` listed (tables with their indexes and sequences)."""
    by_kind: dict[str, list[str]] = {}
    for each in found:
        kind, name = each.split(" ", 1)
        by_kind.setdefault(kind, []).append(name)
    conn = _pg_connection()
    if conn is not None:
        from psycopg import sql

        for kind, statement in (
            ("table", "DROP TABLE IF EXISTS {} CASCADE"),
            ("sequence", "DROP SEQUENCE IF EXISTS {} CASCADE"),
            ("function", "DROP FUNCTION IF EXISTS {} CASCADE"),
        ):
            for name in by_kind.get(kind, []):
                conn.execute(sql.SQL(statement).format(sql.Identifier(name)))
        if by_kind.get("version"):
            conn.execute("DELETE FROM fastaiagent_schema WHERE component = ANY(%s)", (by_kind["version"],))
    keys = by_kind.get("key", [])
    client = _redis_client()
    for i in range(0, len(keys), 500):
        client.unlink(*keys[i : i + 500])


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 600 else text[:600] + "..."


_BEFORE = pytest.StashKey[dict[str, Any]]()
