"""PostgresFactStore specifics: pooling, fork, close/reopen, GC and exit, index setup."""

from __future__ import annotations

import gc
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from _env import require_module
from fastaiagent.learn import Fact, make_fact_store

pytestmark = pytest.mark.postgres
psycopg = require_module("psycopg")  # a missing driver fails under CI=true

from fastaiagent.facts.postgres.schema import index_names  # noqa: E402
from fastaiagent.facts.postgres.store import PostgresFactStore  # noqa: E402


def _connections(url: str, app: str) -> int:
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
        ).fetchone()
    return int(row[0])


def _wait_for(predicate, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _index_build_waiting(url: str, table: str) -> bool:
    """True once a CREATE INDEX CONCURRENTLY on ``table`` is waiting for a lock."""
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query ILIKE %s",
            (f"CREATE %INDEX CONCURRENTLY%{table}%",),
        ).fetchone()
    return int(row[0]) > 0


@pytest.fixture
def app_url(postgres_url: str, pg_table: str) -> Iterator[str]:
    yield f"{postgres_url}?application_name={pg_table}"


def test_location_urls_select_the_postgres_store(postgres_url: str, pg_table: str) -> None:
    for scheme in ("postgres://", "postgresql://"):
        url = scheme + postgres_url.split("://", 1)[1]
        store = make_fact_store(url)
        assert isinstance(store, PostgresFactStore)
        assert (store.min_pool_size, store.max_pool_size, store.table) == (1, 10, "learned_memory")
        store.close()  # never opened: nothing to release


def test_pool_sizes_are_configurable_and_bound_connections(app_url: str, pg_table: str) -> None:
    store = PostgresFactStore(app_url, min_pool_size=2, max_pool_size=3, table=pg_table)
    store.add(Fact("warm", scope="agent", scope_id="a"))
    assert (store.pool.min_size, store.pool.max_size) == (2, 3)
    barrier = threading.Barrier(12)

    def reader() -> None:
        barrier.wait()
        for _ in range(20):
            store.list_active("agent", "a")

    threads = [threading.Thread(target=reader) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 1 <= _connections(app_url.split("?")[0], pg_table) <= 3
    store.close()


def test_bad_pool_arguments_are_refused(postgres_url: str) -> None:
    pools = r"need 0 <= min_pool_size <= max_pool_size and max_pool_size >= 1, got "
    with pytest.raises(ValueError, match=pools + r"5\.\.2"):
        PostgresFactStore(postgres_url, min_pool_size=5, max_pool_size=2)
    with pytest.raises(ValueError, match=pools + r"1\.\.0"):
        PostgresFactStore(postgres_url, max_pool_size=0)
    with pytest.raises(ValueError, match="must be a plain identifier"):
        PostgresFactStore(postgres_url, table="learned_memory; DROP TABLE x")
    with pytest.raises(ValueError, match="url must be a non-empty postgres:// or postgresql:// URL"):
        PostgresFactStore("")


def test_close_releases_connections_and_next_use_reopens(app_url: str, pg_table: str) -> None:
    base = app_url.split("?")[0]
    store = PostgresFactStore(app_url, min_pool_size=2, table=pg_table)
    fact_id = store.add(Fact("kept", scope="user", scope_id="u"))
    assert _wait_for(lambda: _connections(base, pg_table) >= 1)
    store.close()
    assert _wait_for(lambda: _connections(base, pg_table) == 0)
    assert store.get(fact_id) is not None  # reopened
    assert _connections(base, pg_table) >= 1
    store.close()


def test_pool_closes_on_garbage_collection(app_url: str, pg_table: str) -> None:
    base = app_url.split("?")[0]
    store = PostgresFactStore(app_url, table=pg_table)
    store.add(Fact("x", scope="user", scope_id="u"))
    assert _connections(base, pg_table) >= 1
    del store
    gc.collect()
    assert _wait_for(lambda: _connections(base, pg_table) == 0)


def test_a_store_collected_on_its_own_pool_thread_closes_its_pool(app_url: str, pg_table: str) -> None:
    # The finaliser ran where the collector ran, once on a pool worker, and
    # close() tried to join that very thread ("cannot join current thread").
    from psycopg_pool.pool import MaintenanceTask

    base = app_url.split("?")[0]
    store: PostgresFactStore | None = PostgresFactStore(app_url, table=pg_table)
    assert store is not None
    store.add(Fact("x", scope="user", scope_id="u"))
    pool = store._holder.pool
    ran_on: list[str] = []

    class DropTheStore(MaintenanceTask):
        def _run(self, pool) -> None:  # type: ignore[no-untyped-def,override]
            nonlocal store
            ran_on.append(threading.current_thread().name)
            store = None
            gc.collect()

    pool.run_task(DropTheStore(pool))
    assert _wait_for(lambda: _connections(base, pg_table) == 0)
    assert ran_on and ran_on[0].startswith(f"{pool.name}-worker")
    assert pool.closed


def test_pool_closes_at_interpreter_exit(app_url: str, pg_table: str) -> None:
    """A script that never closes its store still exits cleanly: the pool is
    closed by the exit hook (no hang, no thread or connection warnings)."""
    script = (
        "import sys\n"
        "from fastaiagent.learn import Fact\n"
        "from fastaiagent.facts.postgres.store import PostgresFactStore\n"
        f"store = PostgresFactStore({app_url!r}, min_pool_size=2, table={pg_table!r})\n"
        "store.add(Fact('x', scope='user', scope_id='u'))\n"
        "assert store._finalizer.atexit and store._finalizer.alive\n"
        "print('used')\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "used"
    assert "Warning" not in done.stderr and "Error" not in done.stderr, done.stderr
    assert _wait_for(lambda: _connections(app_url.split("?")[0], pg_table) == 0)


def _child_backend_pid(store: PostgresFactStore, out) -> None:  # type: ignore[no-untyped-def]
    with store.pool.connection() as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    out.put((pid, id(store.pool), store.add(Fact("from child", scope="user", scope_id="kid"))))


def test_store_created_before_fork_opens_its_own_pool_in_the_child(
    app_url: str, pg_table: str
) -> None:
    store = PostgresFactStore(app_url, min_pool_size=1, max_pool_size=1, table=pg_table)
    store.add(Fact("parent", scope="user", scope_id="p"))
    with store.pool.connection() as conn:
        parent_pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child_backend_pid, args=(store, out))
    child.start()
    child_pid, _, child_fact = out.get(timeout=30)
    child.join(30)
    assert child.exitcode == 0
    assert child_pid != parent_pid  # its own connection, not the parent's socket
    # The parent's connection survived the child's exit and still works.
    with store.pool.connection() as conn:
        assert conn.execute("SELECT pg_backend_pid()").fetchone()[0] == parent_pid
    assert store.get(child_fact) is not None
    store.close()


def test_first_open_creates_the_spec_indexes(postgres_url: str, pg_table: str) -> None:
    store = PostgresFactStore(postgres_url, table=pg_table)
    store.list_active("user", "u")
    with psycopg.connect(postgres_url) as admin:
        rows = admin.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", (pg_table,)
        ).fetchall()
    defs = dict(rows)
    names = index_names(pg_table)
    subject, scope = defs[names["subject_active"]], defs[names["scope_active"]]
    assert "(scope, scope_id, project_id, created_at DESC)" in subject
    assert "WHERE (superseded_by IS NULL)" in subject
    assert "(scope, project_id, created_at DESC)" in scope
    assert "UNIQUE" in defs[names["active_key"]]
    store.close()


def test_default_index_names_match_the_spec() -> None:
    names = index_names("learned_memory")
    assert names["subject_active"] == "idx_learned_memory_subject_active"
    assert names["scope_active"] == "idx_learned_memory_scope_active"


def test_existing_indexes_are_skipped_without_taking_locks(
    postgres_url: str, pg_table: str
) -> None:
    """With the table set up beforehand, opening the store runs no DDL: it
    opens fine while another session holds a lock CREATE INDEX would wait on."""
    PostgresFactStore(postgres_url, table=pg_table).list_active("user", "u")
    with psycopg.connect(postgres_url) as locker:
        locker.execute(f"LOCK TABLE {pg_table} IN ROW EXCLUSIVE MODE")  # like a busy writer
        # If the store tried CREATE INDEX it would wait on the lock and fail (lock_timeout).
        timed = f"{postgres_url}?options=-c%20lock_timeout%3D2000"
        store = PostgresFactStore(timed, table=pg_table)
        assert store.list_active("user", "u") == []
        locker.rollback()
    store.close()


def test_user_created_indexes_are_found_and_kept(postgres_url: str, pg_table: str) -> None:
    """The spec's upgrade path: CREATE INDEX CONCURRENTLY by hand, then open."""
    names = index_names(pg_table)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            f"CREATE TABLE {pg_table} (id BIGSERIAL PRIMARY KEY, fact TEXT NOT NULL, "
            "fact_key TEXT NOT NULL, scope TEXT NOT NULL, scope_id TEXT NOT NULL DEFAULT '', "
            "project_id TEXT NOT NULL DEFAULT '', confidence DOUBLE PRECISION NOT NULL DEFAULT 1, "
            "source TEXT NOT NULL DEFAULT 'manual', source_trace_id TEXT, "
            "created_at DOUBLE PRECISION NOT NULL, superseded_by BIGINT, "
            "metadata JSONB NOT NULL DEFAULT '{}')"
        )
        for kind, cols in (
            ("subject_active", "(scope, scope_id, project_id, created_at DESC)"),
            ("scope_active", "(scope, project_id, created_at DESC)"),
        ):
            admin.execute(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {names[kind]} ON {pg_table} {cols} "
                "WHERE superseded_by IS NULL"
            )
        oids = dict(
            admin.execute(
                "SELECT relname, oid FROM pg_class WHERE relname = ANY(%s)",
                ([names["subject_active"], names["scope_active"]],),
            ).fetchall()
        )
    store = PostgresFactStore(postgres_url, table=pg_table)
    fact_id = store.add(Fact("works", scope="user", scope_id="u"))
    assert store.add(Fact("WORKS", scope="user", scope_id="u")) == fact_id
    with psycopg.connect(postgres_url) as admin:
        after = dict(
            admin.execute(
                "SELECT relname, oid FROM pg_class WHERE relname = ANY(%s)",
                ([names["subject_active"], names["scope_active"]],),
            ).fetchall()
        )
    assert after == oids  # the same index objects: nothing was rebuilt
    with psycopg.connect(postgres_url) as admin:  # the store's own two were built
        valid = {
            r[0]
            for r in admin.execute(
                "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE i.indrelid = %s::regclass AND i.indisvalid",
                (pg_table,),
            )
        }
    assert set(names.values()) <= valid
    store.close()


def test_missing_indexes_on_an_existing_table_build_without_blocking_writers(
    postgres_url: str, pg_table: str
) -> None:
    """On a table that already exists the store builds missing indexes
    CONCURRENTLY: a writer can insert while the first open is under way."""
    PostgresFactStore(postgres_url, table=pg_table).list_active("user", "u")
    names = index_names(pg_table)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"DROP INDEX {names['subject_all']}")
        admin.execute(f"DROP INDEX {names['scope_active']}")
    writer = psycopg.connect(postgres_url)
    writer.execute(  # an open write transaction: CONCURRENTLY waits for it, others don't
        f"INSERT INTO {pg_table} (fact, fact_key, scope, scope_id, created_at) "
        "VALUES ('w', 'w', 'user', 'w', 1)"
    )
    opened = threading.Event()
    store = PostgresFactStore(f"{postgres_url}?options=-c%20lock_timeout%3D20000", table=pg_table)
    opener = threading.Thread(target=lambda: (store.list_active("user", "u"), opened.set()))
    opener.start()
    assert _wait_for(lambda: _index_build_waiting(postgres_url, pg_table))
    with psycopg.connect(f"{postgres_url}?options=-c%20lock_timeout%3D2000") as other:
        other.execute(  # a second writer is not blocked by the index build
            f"INSERT INTO {pg_table} (fact, fact_key, scope, scope_id, created_at) "
            "VALUES ('x', 'x', 'user', 'x', 2)"
        )
    writer.commit()
    writer.close()
    opener.join(30)
    assert opened.is_set()
    with psycopg.connect(postgres_url) as admin:
        present = {
            r[0]
            for r in admin.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = %s", (pg_table,)
            )
        }
    assert set(names.values()) <= present
    store.close()


def test_reads_use_the_partial_indexes(postgres_url: str, pg_table: str) -> None:
    store = PostgresFactStore(postgres_url, table=pg_table)
    store.list_active("user", "u7")  # first open creates the table
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            f"INSERT INTO {pg_table} (fact, fact_key, scope, scope_id, created_at) "
            "SELECT 'f' || g, 'f' || g, 'user', 'u' || (g % 500), g FROM generate_series(1, 20000) g"
        )
        admin.execute(f"ANALYZE {pg_table}")
        plan = "\n".join(
            r[0]
            for r in admin.execute(
                f"EXPLAIN SELECT * FROM {pg_table} WHERE scope = 'user' AND project_id = '' "
                "AND scope_id = 'u7' AND superseded_by IS NULL "
                "ORDER BY created_at DESC, id DESC LIMIT 50"
            )
        )
    assert index_names(pg_table)["subject_active"] in plan, plan
    assert len(store.list_active("user", "u7")) == 40
    store.close()


def test_server_down_is_a_clear_connection_error() -> None:
    store = PostgresFactStore("postgresql://postgres@127.0.0.1:1/test", timeout=1.0)
    with pytest.raises(ConnectionError, match="cannot connect to Postgres"):
        store.add(Fact("x", scope="user", scope_id="u"))
    store.close()


def test_password_is_not_echoed_in_errors() -> None:
    store = PostgresFactStore("postgresql://postgres:s3cret@127.0.0.1:1/test", timeout=1.0)
    with pytest.raises(ConnectionError, match=r"postgresql://postgres:\*\*\*@127\.0\.0\.1:1/") as info:
        store.list_active("user", "u")
    assert "s3cret" not in str(info.value)
    store.close()


if os.name != "posix":  # pragma: no cover
    pytest.skip("fork tests need POSIX", allow_module_level=True)


def test_an_older_table_is_upgraded_in_place(postgres_url: str, pg_table: str) -> None:
    """A table from an older SDK: no fact_key column, and duplicate active rows
    (written before adds were idempotent). The first open fills the key and
    folds the duplicates into the oldest row, keeping them as history."""
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            f"CREATE TABLE {pg_table} (id BIGSERIAL PRIMARY KEY, fact TEXT NOT NULL, "
            "scope TEXT NOT NULL, scope_id TEXT NOT NULL DEFAULT '', "
            "project_id TEXT NOT NULL DEFAULT '', confidence DOUBLE PRECISION NOT NULL DEFAULT 1, "
            "source TEXT NOT NULL DEFAULT 'manual', source_trace_id TEXT, "
            "created_at DOUBLE PRECISION NOT NULL, superseded_by BIGINT, "
            "metadata JSONB NOT NULL DEFAULT '{}')"
        )
        for i, (text, who) in enumerate(
            [("Likes tea", "u"), ("likes  TEA", "u"), ("Likes tea", "v"), ("Other", "u")]
        ):
            admin.execute(
                f"INSERT INTO {pg_table} (fact, scope, scope_id, created_at) "
                "VALUES (%s, 'user', %s, %s)",
                (text, who, 1000.0 + i),
            )
    store = PostgresFactStore(postgres_url, table=pg_table)
    active_u = store.list_active("user", "u")
    assert [f.fact for f in active_u] == ["Other", "Likes tea"]
    first = active_u[1].id
    assert store.get(first + 1).superseded_by == first  # type: ignore[operator,union-attr]
    assert store.add(Fact("LIKES tea", scope="user", scope_id="u")) == first
    assert [f.fact for f in store.list_active("user", "v")] == ["Likes tea"]
    store.close()
