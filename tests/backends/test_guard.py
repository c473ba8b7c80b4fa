"""The suite's guard (tests/_guard.py) fails the test that leaves a table or key
behind, and the run when something named with its run id outlives it; the
process-wide state is reset between tests (tests/_process_state.py).

Each case runs a small pytest session of its own, in a subprocess, on the real
Postgres and Redis, with the suite's conftest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]


def run_session(tmp_path: Path, body: str, run_id: str | None) -> subprocess.CompletedProcess[str]:
    """``body`` as a test file beside a copy of the suite's conftest, run with
    ``run_id`` as the id of a run of its own (None: a session inside this run, as
    any test that starts pytest makes)."""
    (tmp_path / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    (tmp_path / "test_case.py").write_text(textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    if run_id is not None:
        env.pop("FASTAIAGENT_TEST_RUN_OWNER", None)
        env["FASTAIAGENT_TEST_RUN"] = run_id
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         "-n", "0", "-o", "addopts=", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.postgres
@pytest.mark.redis
def test_a_test_that_leaves_a_table_or_key_fails_and_they_are_removed(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    import psycopg
    import redis

    run_id = uuid.uuid4().hex[:8]
    result = run_session(
        tmp_path,
        """
        import psycopg, redis
        from _env import POSTGRES_URL, REDIS_URL, unique_name

        def test_leaves_both():
            name = unique_name("leak")
            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                conn.execute(f"CREATE TABLE {name}_extra (id int)")
            redis.Redis.from_url(REDIS_URL).set(name + ":k", 1)

        def test_cleans_up(pg_table, redis_prefix):
            from fastaiagent import Memory
            Memory(location=f"{POSTGRES_URL}?table={pg_table}").persist("x", tier="user", id="u")
            Memory(location=f"{REDIS_URL}?prefix={redis_prefix}").persist("x", tier="user", id="u")
        """,
        run_id,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "2 passed, 1 error" in out, out  # the leaving test errs at teardown
    assert f"this test left behind (now removed): ['table fa_leak_{run_id}_" in out, out
    assert f"fa_leak_{run_id}_" in out and ":k" in out, out
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        left = conn.execute("SELECT relname FROM pg_class WHERE relname LIKE %s", (f"%{run_id}%",))
        assert left.fetchall() == []
    client = redis.Redis.from_url(redis_url)
    try:
        assert list(client.scan_iter(match=f"*{run_id}*")) == []
    finally:
        client.close()


@pytest.mark.postgres
def test_the_run_fails_on_what_outlives_it_named_with_its_id(tmp_path: Path, postgres_url: str) -> None:
    import psycopg

    run_id = uuid.uuid4().hex[:8]
    result = run_session(
        tmp_path,
        """
        import psycopg
        from _env import POSTGRES_URL, RUN_ID

        def test_made_outside_unique_name():
            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                conn.execute(f"CREATE TABLE fa_stray_{RUN_ID}_x (id int)")
        """,
        run_id,
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert f"the run (id {run_id}) left tables or keys behind" in out, out
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass(%s)", (f"fa_stray_{run_id}_x",)).fetchone()[0] is None


def test_a_pause_one_test_tripped_is_lifted_for_the_next(tmp_path: Path) -> None:
    result = run_session(
        tmp_path,
        """
        import pytest
        from fastaiagent.errors import StoreUnavailableError
        from fastaiagent.facts.postgres.store import PostgresFactStore

        URL = "postgresql://postgres@127.0.0.1:1/test"

        @pytest.mark.parametrize("attempt", [1, 2])
        def test_each_sees_the_refusal_not_a_pause(attempt):
            with pytest.raises(StoreUnavailableError, match="cannot connect to Postgres"):
                PostgresFactStore(URL).list_active("user", "u")
        """,
        uuid.uuid4().hex[:8],
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.postgres
def test_a_session_a_test_starts_leaves_the_tables_the_run_uses_alone(
    tmp_path: Path, postgres_url: str, pg_table: str
) -> None:
    import psycopg

    from fastaiagent.facts.postgres.store import PostgresFactStore

    store = PostgresFactStore(postgres_url, table=pg_table)
    store.list_active("user", "u")  # a table of this run, in use while the session runs
    store.close()
    result = run_session(tmp_path, "def test_nothing():\n    pass\n", None)
    assert result.returncode == 0, result.stdout + result.stderr
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass(%s)", (pg_table,)).fetchone()[0] is not None
