"""Postgres schema versions and error classes, on the real server.

Tables written before versions were recorded (the DDL of commit ab594ca,
written here verbatim) open with every row kept and their version recorded in
``fastaiagent_schema``; a second open runs no DDL and takes no lock; a newer
version raises SchemaVersionError; workers opening at once migrate once. A
lost or refused connection raises StoreUnavailableError (a ConnectionError),
also when the one retry fails too.
"""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest

from _env import require_module
from fastaiagent.errors import SchemaVersionError, StoreUnavailableError
from fastaiagent.facts.windows import WindowKey
from fastaiagent.learn import Fact

pytestmark = pytest.mark.postgres
psycopg = require_module("psycopg")  # a missing driver fails under CI=true

from fastaiagent.facts.postgres.schema import index_names  # noqa: E402
from fastaiagent.facts.postgres.store import PostgresFactStore  # noqa: E402
from fastaiagent.facts.postgres.windows import PostgresWindowStore  # noqa: E402


def _old_fact_table(conn, table: str) -> None:  # type: ignore[no-untyped-def]
    """The table and indexes as ab594ca's PostgresFactStore created them."""
    names = index_names(table)
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {table} ("
        "id BIGSERIAL PRIMARY KEY, fact TEXT NOT NULL, fact_key TEXT NOT NULL, "
        "scope TEXT NOT NULL, scope_id TEXT NOT NULL DEFAULT '', "
        "project_id TEXT NOT NULL DEFAULT '', "
        "confidence DOUBLE PRECISION NOT NULL DEFAULT 1.0, "
        "source TEXT NOT NULL DEFAULT 'manual', source_trace_id TEXT, "
        "created_at DOUBLE PRECISION NOT NULL, superseded_by BIGINT, "
        "metadata JSONB NOT NULL DEFAULT '{}'::jsonb)"
    )
    for name, columns in (
        (names["subject_active"], "(scope, scope_id, project_id, created_at DESC) "
         "WHERE superseded_by IS NULL"),
        (names["scope_active"], "(scope, project_id, created_at DESC) WHERE superseded_by IS NULL"),
        (names["active_key"], "(scope, scope_id, project_id, md5(fact_key)) "
         "WHERE superseded_by IS NULL"),
        (names["subject_all"], "(scope, scope_id, project_id)"),
    ):
        unique = "UNIQUE " if name == names["active_key"] else ""
        conn.execute(f"CREATE {unique}INDEX IF NOT EXISTS {name} ON {table} {columns}")


FACTS_VERSION = 3  # 2: the text index over every row (delete(fact=) removes history too); 3: the two times


def _old_windows_table(conn, table: str) -> None:  # type: ignore[no-untyped-def]
    """The windows table as ab594ca's PostgresWindowStore created it."""
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {table} (agent_id TEXT NOT NULL, project_id TEXT NOT NULL, "
        "user_id TEXT NOT NULL, version TEXT NOT NULL, state TEXT NOT NULL, "
        "updated_at TIMESTAMPTZ NOT NULL DEFAULT now(), expires_at TIMESTAMPTZ, "
        "PRIMARY KEY (agent_id, project_id, user_id))"
    )
    conn.execute(
        f"CREATE INDEX IF NOT EXISTS idx_{table}_expires ON {table} (expires_at) "
        "WHERE expires_at IS NOT NULL"
    )


@pytest.fixture
def table(pg_table: str) -> str:
    """A fresh fact table (pg_table destroys its store afterwards)."""
    return pg_table


def _versions(url: str, table: str) -> dict[str, int]:
    with psycopg.connect(url) as admin:
        rows = admin.execute(
            "SELECT component, version FROM fastaiagent_schema WHERE component IN (%s, %s)",
            (f"facts:{table}", f"windows:{table}_windows"),
        ).fetchall()
    return dict(rows)


def _set_version(url: str, component: str, version: int) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(
            "UPDATE fastaiagent_schema SET version = %s WHERE component = %s", (version, component)
        )


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement sent through psycopg.Connection.execute (the stores' only path)."""
    seen: list[str] = []
    real = psycopg.Connection.execute

    def execute(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(query if isinstance(query, str) else query.as_string(self))
        return real(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    return seen


def _schema_work(statements: list[str]) -> list[str]:
    words = ("CREATE", "DROP", "ALTER", "INSERT INTO FASTAIAGENT_SCHEMA")
    return [
        s for s in statements
        if s.lstrip().upper().startswith(words) or "pg_advisory" in s
    ]


def test_an_old_fact_table_keeps_its_rows_and_records_its_version(
    postgres_url: str, table: str
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        _old_fact_table(admin, table)
        for i, (text, who) in enumerate([("Likes tea", "u"), ("Prefers email", "u"), ("X", "v")]):
            admin.execute(
                f"INSERT INTO {table} (fact, fact_key, scope, scope_id, created_at, metadata) "
                "VALUES (%s, lower(%s), 'user', %s, %s, '{\"n\": 1}')",
                (text, text, who, 1000.0 + i),
            )
    store = PostgresFactStore(postgres_url, table=table)
    assert [f.fact for f in store.list_active("user", "u")] == ["Prefers email", "Likes tea"]
    assert store.list_active("user", "v")[0].metadata == {"n": 1}
    assert store.add(Fact("LIKES tea", scope="user", scope_id="u")) == 1
    assert _versions(postgres_url, table) == {f"facts:{table}": FACTS_VERSION}
    store.close()


def test_a_second_open_runs_no_ddl_and_takes_no_lock(
    postgres_url: str, table: str, statements: list[str]
) -> None:
    first = PostgresFactStore(postgres_url, table=table)
    first.add(Fact("x", scope="user", scope_id="u"))
    first.close()
    assert _schema_work(statements)  # the first open set the table up
    statements.clear()
    second = PostgresFactStore(postgres_url, table=table)
    assert [f.fact for f in second.list_active("user", "u")] == ["x"]
    assert statements and _schema_work(statements) == []
    second.close()


def test_a_newer_table_is_refused_with_the_fix(postgres_url: str, table: str) -> None:
    PostgresFactStore(postgres_url, table=table).list_active("user", "u")
    _set_version(postgres_url, f"facts:{table}", 7)
    store = PostgresFactStore(postgres_url, table=table)
    with pytest.raises(SchemaVersionError, match=rf"'facts:{table}' at schema version 7.*pip install -U"):
        store.list_active("user", "u")
    store.close()


def test_a_version_1_table_gets_the_text_index_concurrently_and_forgets_history(
    postgres_url: str, table: str, statements: list[str]
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        _old_fact_table(admin, table)  # version 1's indexes
        admin.execute(
            "CREATE TABLE IF NOT EXISTS fastaiagent_schema "
            "(component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
        )
        admin.execute("INSERT INTO fastaiagent_schema VALUES (%s, 1)", (f"facts:{table}",))
        for text, who, by in [("Card 4111", "u", 2), ("Card 5555", "u", None), ("card 4111", "v", None)]:
            admin.execute(
                f"INSERT INTO {table} (fact, fact_key, scope, scope_id, created_at, superseded_by) "
                "VALUES (%s, lower(%s), 'user', %s, 1000, %s)",
                (text, text, who, by),
            )
    store = PostgresFactStore(postgres_url, table=table)
    again = store.add(Fact("CARD 4111", scope="user", scope_id="u"))  # active again
    name = index_names(table)["text_all"]
    assert any(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS \"{name}\"" in s for s in statements)
    assert _versions(postgres_url, table) == {f"facts:{table}": FACTS_VERSION}
    with psycopg.connect(postgres_url) as admin:
        valid = admin.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = %s",
            (name,),
        ).fetchone()
    assert valid == (True,)
    assert store.delete("user", "u", fact="card 4111") == 2  # #1 (superseded) and the new one
    assert store.get(1) is None and store.get(again) is None
    assert [f.fact for f in store.list_active("user", "u")] == ["Card 5555"]
    assert [f.fact for f in store.list_active("user", "v")] == ["card 4111"]
    store.close()


def test_an_old_windows_table_keeps_its_rows(postgres_url: str, table: str) -> None:
    windows_table = f"{table}_windows"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        _old_windows_table(admin, windows_table)
        admin.execute(
            f"INSERT INTO {windows_table} (agent_id, project_id, user_id, version, state) "
            "VALUES ('a', '', 'u', 'v1', '[1]')"
        )
    store = PostgresFactStore(postgres_url, table=table)
    windows = PostgresWindowStore(store)
    stored = windows.load(WindowKey("a", "", "u"))
    assert stored is not None and (stored.version, stored.state) == ("v1", "[1]")
    assert _versions(postgres_url, table) == {f"facts:{table}": FACTS_VERSION, f"windows:{windows_table}": 2}
    _set_version(postgres_url, f"windows:{windows_table}", 5)
    newer = PostgresWindowStore(store)
    with pytest.raises(SchemaVersionError, match=rf"'windows:{windows_table}' at schema version 5"):
        newer.load(WindowKey("a", "", "u"))
    store.close()


def test_workers_opening_an_old_table_at_once_all_succeed(postgres_url: str, table: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        _old_fact_table(admin, table)
        admin.execute(  # an index missing too, so the first open has real work to do
            f"DROP INDEX {index_names(table)['scope_active']}"
        )
        admin.execute(
            f"INSERT INTO {table} (fact, fact_key, scope, scope_id, created_at) "
            "VALUES ('kept', 'kept', 'user', 'u', 1)"
        )
    barrier, results = threading.Barrier(4), []

    def open_one() -> None:
        store = PostgresFactStore(postgres_url, table=table)
        barrier.wait()
        try:
            results.append([f.fact for f in store.list_active("user", "u")])
        except Exception as exc:  # collected, asserted below
            results.append([repr(exc)])
        finally:
            store.close()

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == [["kept"]] * 4
    assert _versions(postgres_url, table) == {f"facts:{table}": FACTS_VERSION}
    with psycopg.connect(postgres_url) as admin:
        present = {
            r[0] for r in admin.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", (table,))
        }
    assert set(index_names(table).values()) <= present


# -- errors by type --------------------------------------------------------------------


def test_a_retry_that_fails_again_is_store_unavailable(postgres_url: str, table: str) -> None:
    """Both the call and its one retry land on a connection the server drops."""
    store = PostgresFactStore(postgres_url, table=table, min_pool_size=2, max_pool_size=2)
    store.list_active("user", "u")

    def killed(conn):  # type: ignore[no-untyped-def]
        conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    with pytest.raises(StoreUnavailableError, match=r"lost the Postgres connection.*AdminShutdown"):
        store._run(killed)
    assert store.list_active("user", "u") == []  # the pool recovers afterwards
    store.close()


class _Proxy:
    """A TCP relay to the Postgres server that the test can cut, as a network
    failure or a server going away would (the server itself is shared)."""

    def __init__(self, port: int) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target = port
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # the listener was closed: stop
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for each in (source, sink):
            with contextlib.suppress(OSError):
                each.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Refuse new connections and drop the open ones."""
        self.listener.shutdown(socket.SHUT_RDWR)  # wakes accept(); close alone would not
        self.listener.close()
        with self.lock:
            for each in self.sockets:
                with contextlib.suppress(OSError):
                    each.shutdown(socket.SHUT_RDWR)
                each.close()


def test_a_lost_then_refused_server_is_a_connection_error(postgres_url: str, table: str) -> None:
    PostgresFactStore(postgres_url, table=table).list_active("user", "u")  # set the table up
    proxy = _Proxy(int(psycopg.conninfo.conninfo_to_dict(postgres_url).get("port") or 5432))
    url = postgres_url.replace(":5432/", f":{proxy.port}/")
    store = PostgresFactStore(url, table=table, timeout=1.0)
    store.add(Fact("before", scope="user", scope_id="u"))
    proxy.cut()
    with pytest.raises(ConnectionError, match=r"(lost the Postgres connection|no Postgres connection|cannot connect to Postgres)"):
        store.list_active("user", "u")
    with pytest.raises(StoreUnavailableError, match="fact store"):
        store.add(Fact("after", scope="user", scope_id="u"))
    store.close()
