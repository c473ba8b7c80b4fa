"""PostgresFactStore: durable facts in a Postgres table, for multi-node deployments.

One connection pool per process (re-created after a fork), partial indexes on
the active rows so a read costs what it returns, and a unique partial index on
the active key so concurrent writers of the same fact share one row.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import partial
from typing import Any, TypeVar

from fastaiagent._optional import require
from fastaiagent._validate import integer, one_of
from fastaiagent.errors import (
    ConflictError,
    FastAIAgentError,
    InvalidTypeError,
    InvalidValueError,
    StoreConfigError,
    StoreCorruptError,
    StoreUnavailableError,
    UsageError,
)
from fastaiagent.facts import outage
from fastaiagent.facts.capabilities import StoreCapabilities
from fastaiagent.facts.fact import SOURCE_CONVERSATION, Fact, current_source
from fastaiagent.facts.locations import check_postgres_url, redacted_url
from fastaiagent.facts.postgres.schema import FactTable
from fastaiagent.facts.schema import Schema, migrate_postgres
from fastaiagent.facts.scoping import (
    Selector,
    check_fact_id,
    check_fact_text,
    check_supersede,
    delete_selector,
    normalize_text,
    read_selector,
    validate_for_write,
)
from fastaiagent.facts.sql_clauses import (
    FACT_COLUMNS,
    as_of_clause,
    browse_where,
    fact_values,
    insert_fact,
    selector_where,
)
from fastaiagent.facts.store import DELETE_BATCH, BrowseFilter, StoreFront, SubjectCount
from fastaiagent.facts.validity import history_cutoff, moment_or_now

psycopg = require("psycopg", "postgres")
psycopg_pool = require("psycopg_pool", "postgres")
from psycopg import sql  # noqa: E402  (imported after the extra check on purpose)
from psycopg.types.json import Jsonb  # noqa: E402

logger = logging.getLogger("fastaiagent.facts.postgres")

DEFAULT_TABLE = "learned_memory"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,40}$")
# One subject's active rows, the varying columns only (a subject read's parts); the
# source's old name read as today's here (RENAMED_SOURCES), not per fact in Python.
_SUBJECT_SELECT = (
    "SELECT fact, confidence, CASE source WHEN 'learn' THEN 'traces' ELSE source END, "
    "source_trace_id, NULLIF(metadata, '{{}}'::jsonb), id, "
    "created_at, valid_from, valid_to FROM {} WHERE scope = %s AND scope_id = %s "
    "AND project_id = %s AND superseded_by IS NULL "
    "AND (valid_from IS NULL OR valid_from <= %s) "
)
_NEWEST = "ORDER BY created_at DESC, id DESC LIMIT %s"
_ALWAYS = float("inf")  # a valid_from bound every fact meets (include_expired reads)
DEFAULT_CONNECT_TIMEOUT = 5
POOLERS = ("transaction", "session")  # what sits between the store and Postgres (None: nothing)
"""Seconds to open a connection when neither the URL nor the store sets one."""
_PAUSED = "cannot reach Postgres for the fact store: "
_T = TypeVar("_T")
_PARENT_POOLS: list[Any] = []  # pools inherited through fork, never used or closed here


def _connect_kwargs(url: str, connect_timeout: int | None) -> tuple[dict[str, Any], int]:
    """The connect arguments and the timeout in effect: ``connect_timeout`` when
    given, else the URL's own, else :data:`DEFAULT_CONNECT_TIMEOUT` (psycopg's
    default would be 130 s)."""
    if connect_timeout is not None:
        seconds = integer("connect_timeout", connect_timeout, minimum=2)
        return {"connect_timeout": seconds}, seconds
    try:
        given = psycopg.conninfo.conninfo_to_dict(url).get("connect_timeout")
    except psycopg.Error as exc:  # parsed here, not by a server: the URL is wrong
        raise InvalidValueError(
            f"{redacted_url(url)} is not a Postgres URL libpq can read ({redacted_url(str(exc))}): "
            "use postgresql://user:password@host:port/database"
        ) from None
    if given is None:
        return {"connect_timeout": DEFAULT_CONNECT_TIMEOUT}, DEFAULT_CONNECT_TIMEOUT
    try:
        return {}, int(given)
    except ValueError:
        raise InvalidValueError(
            f"{redacted_url(url)}: connect_timeout={given!r} must be whole seconds, e.g. 5"
        ) from None


def _row_to_fact(row: tuple[Any, ...]) -> Fact:
    """A fact from a row of the ``cols`` columns (:data:`FACT_COLUMNS`, empty metadata
    as NULL)."""
    superseded_by = None if row[10] is None else int(row[10])
    return Fact(
        row[0], row[1], row[2], row[3], float(row[4]), current_source(row[5]), row[6], dict(row[7] or {}),
        int(row[8]), float(row[9]), superseded_by, row[11], row[12], row[13],
    )  # fmt: skip


class _PoolHolder:
    """The live pool and the process that opened it, shared with the finalizer."""

    def __init__(self) -> None:
        self.pool: Any = None
        self.pid = 0


def _close_holder(holder: _PoolHolder) -> None:
    """Close the pool, but only in the process that opened it: a forked child
    must not close sockets that still belong to its parent."""
    pool, holder.pool = holder.pool, None
    if pool is None or holder.pid != os.getpid():
        return
    if threading.current_thread().name.startswith(f"{pool.name}-"):
        # The store was collected on one of its pool's own threads (a finaliser
        # runs wherever the collector does), and close() joins those threads:
        # it runs on a thread of its own instead.
        threading.Thread(target=pool.close, name=f"{pool.name}-closing", daemon=True).start()
        return
    pool.close()


class PostgresFactStore(StoreFront, StoreCapabilities):
    """Facts in a Postgres table (``learned_memory`` by default).

    ``url`` is any libpq URL (``postgres://`` or ``postgresql://``). The store
    keeps a pool of ``min_pool_size``..``max_pool_size`` connections per process,
    opened lazily on first use; a store created before a fork opens its own pool
    in the child. ``close()`` releases the connections and the next call reopens
    them; the pool is also closed when the store is garbage-collected and at
    interpreter exit. On first open the schema version is checked (component
    ``facts:<table>`` in ``fastaiagent_schema``): a new or older table is set up
    once; a table at this version only has its indexes looked up in
    ``pg_indexes`` (a missing one is rebuilt ``CONCURRENTLY``), so no
    lock-taking DDL runs against a table that is already set up. A table
    written by a newer fastaiagent raises
    :class:`~fastaiagent.errors.SchemaVersionError`. A lost or refused
    connection raises :class:`~fastaiagent.errors.StoreUnavailableError`
    (a ``ConnectionError``) naming the server's reason, and pauses calls to
    that server for every store of the process (see
    :mod:`fastaiagent.facts.outage`), so an outage costs one wait.

    ``connect_timeout`` (whole seconds, at least 2 as in libpq) bounds opening a
    connection; it defaults to the URL's ``connect_timeout`` parameter, else
    :data:`DEFAULT_CONNECT_TIMEOUT`. ``timeout`` bounds waiting for a free
    pooled connection while the pool is busy.

    ``pooler="transaction"`` (or ``?pooler=transaction`` in a location URL) is
    for a URL that reaches Postgres through a transaction-mode pooler such as
    PgBouncer: no server-side prepared statements, and schema work in one
    transaction (see :mod:`fastaiagent.facts.schema`). ``"session"`` (a
    session-mode pooler) keeps prepared statements. None (the default) looks at
    the first connection: a pooler in between (its process id is not the
    server's) is treated as a transaction-mode one, so no write is acknowledged
    and then lost behind a pooler the URL does not name.
    """

    backend = "postgres"
    backend_class = "Postgres"

    delete_batch: int = DELETE_BATCH
    """Rows one step of :meth:`delete` removes at most (one short statement)."""

    def __init__(
        self,
        url: str,
        min_pool_size: int = 1,
        max_pool_size: int = 10,
        table: str = DEFAULT_TABLE,
        *,
        timeout: float = 30.0,
        connect_timeout: int | None = None,
        pooler: str | None = None,
    ) -> None:
        if not isinstance(url, str) or not url:
            raise InvalidValueError("url must be a non-empty postgres:// or postgresql:// URL")
        check_postgres_url(url, own=())  # a typo is named here, never reported as an outage
        if not isinstance(table, str) or not _IDENTIFIER.match(table):
            raise InvalidValueError(
                f"table {table!r} must be a plain identifier (letters, digits, _; <= 41 chars)"
            )
        if not (isinstance(min_pool_size, int) and isinstance(max_pool_size, int)):
            raise InvalidTypeError("min_pool_size and max_pool_size must be ints")
        if min_pool_size < 0 or max_pool_size < 1 or min_pool_size > max_pool_size:
            raise InvalidValueError(
                f"need 0 <= min_pool_size <= max_pool_size and max_pool_size >= 1, "
                f"got {min_pool_size}..{max_pool_size}"
            )
        if timeout <= 0:
            raise InvalidValueError("timeout must be > 0 seconds")
        self.url = url
        self.table = table
        self.min_pool_size = min_pool_size
        self.max_pool_size = max_pool_size
        self.timeout = timeout
        self._connect_kwargs, self.connect_timeout = _connect_kwargs(url, connect_timeout)
        self.pooler = None if pooler is None else one_of("pooler", pooler, POOLERS)
        if self.pooler == "transaction":  # a statement prepared on one server connection
            self._connect_kwargs["prepare_threshold"] = None  # is unknown on the next
        self._health = outage.health(f"Postgres at {redacted_url(url)}")
        self._lock = threading.Lock()
        self._holder = _PoolHolder()
        self._schema_ready = False
        self._finalizer = weakref.finalize(self, _close_holder, self._holder)
        self._t = sql.Identifier(table)
        self._queries = self._build_queries()
        self._table = FactTable(table, f"the database at {redacted_url(url)}")

    def __repr__(self) -> str:
        return f"PostgresFactStore(table={self.table!r}, pool={self.min_pool_size}..{self.max_pool_size})"

    # -- pool --------------------------------------------------------------

    @property
    def pool(self) -> Any:
        """This process's ``psycopg_pool.ConnectionPool``, opened on first use."""
        holder = self._holder
        if holder.pool is not None and holder.pid == os.getpid():
            return holder.pool
        with self._lock:
            if holder.pool is not None and holder.pid != os.getpid():
                # Forked child: set the parent's pool aside without closing (or even
                # collecting) it, so nothing here can touch the parent's sockets.
                _PARENT_POOLS.append(holder.pool)
                holder.pool = None
                self._schema_ready = True  # the parent already set the table up
            if holder.pool is None:
                # Callers queued on the lock behind a failed open give up at once.
                self._health.check(_PAUSED)
                holder.pool = self._open_pool()
                holder.pid = os.getpid()
            return holder.pool

    def _open_pool(self) -> Any:
        # One direct connection first: a server that is down, unreachable or
        # refusing us fails here within connect_timeout and with its own reason
        # (a pool would wait out its timeout, the reason only in its log).
        try:
            conn = psycopg.connect(self.url, autocommit=True, **self._connect_kwargs)
        except psycopg.Error as exc:
            raise self._cannot_connect(exc) from exc
        try:
            with conn:
                self._notice_pooler(conn)
                if not self._schema_ready:
                    with self.schema_work(conn):
                        self._table.ensure(conn)
                    self._schema_ready = True
                self._compile(conn)
        except BaseException as exc:
            mapped = self._unavailable(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        pool = psycopg_pool.ConnectionPool(
            self.url,
            min_size=self.min_pool_size,
            max_size=self.max_pool_size,
            kwargs={"autocommit": True, **self._connect_kwargs},
            timeout=self.timeout,
            open=False,
            name=f"fastaiagent-{self.table}",
        )
        pool.open(wait=False)
        return pool

    def _notice_pooler(self, conn: Any) -> None:
        """Behind a pooler the URL does not name, work as behind a transaction pooler.

        A pooler answers the connect itself, with a process id of its own (for
        cancel requests), so the server's differs. Which mode it pools in cannot be
        seen from here: transaction mode hands one client's prepared statements to
        the next client's calls (a write acknowledged and then not in the table), so
        the mode safe in every mode is taken: no server-side prepared statements,
        schema work in one transaction. ``pooler="session"`` keeps them.
        """
        if self.pooler is not None:
            return
        server_pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        if server_pid == conn.info.backend_pid:
            return
        self.pooler = "transaction"
        self._connect_kwargs["prepare_threshold"] = None
        conn.prepare_threshold = None
        logger.info(
            "a pooler is between this process and Postgres (%s): no prepared statements "
            "(pass pooler='session' to keep them behind a session-mode pooler)",
            redacted_url(self.url),
        )

    def _cannot_connect(self, exc: BaseException) -> StoreUnavailableError | StoreConfigError:
        """The error for a failed connect, naming the server's reason. A server that
        answered and refused the URL's user, password or database, or a value libpq
        refused, is :class:`~fastaiagent.errors.StoreConfigError` (retrying will not
        fix it: the server is not paused); the rest pauses the server."""
        reason = " ".join(redacted_url(str(exc)).split())
        said = f"cannot connect to Postgres for the fact store ({redacted_url(self.url)}): {reason}"
        if any(words in reason for words in _REFUSED_CONFIG):
            return StoreConfigError(
                f"{said}; check the URL's user, password and database (and the server's "
                "pg_hba.conf for this client)"
            )
        if _REFUSED_VALUE.search(reason):
            return StoreConfigError(f"{said}; correct that value in the URL")
        self._health.failed(reason)
        return StoreUnavailableError(
            f"{said}; check that the server is up and the URL's host, port, user, "
            "password and database"
        )

    def _drop_pool(self, pool: Any) -> None:
        """Set ``pool`` aside (if still current) and close it off the caller's path:
        its server failed, so the next call opens a fresh one (one direct connect)."""
        holder = self._holder
        if pool is None or holder.pool is not pool or holder.pid != os.getpid():
            return
        holder.pool = None
        threading.Thread(target=pool.close, name="fastaiagent-pool-close", daemon=True).start()

    def schema_work(self, conn: Any) -> AbstractContextManager[Any]:
        """Where schema work on ``conn`` runs: in one transaction behind a transaction
        pooler (see :mod:`fastaiagent.facts.schema`), else as it goes."""
        return conn.transaction() if self.pooler == "transaction" else nullcontext()

    def close(self) -> None:
        """Release every connection; the store reopens on its next use."""
        with self._lock:
            _close_holder(self._holder)

    def destroy(self) -> int:
        """Drop everything this store made in the database, in one transaction: its
        fact table, the windows, items and vector tables beside it (every vector
        size), their functions and schema-version rows (the names are listed in
        :mod:`fastaiagent.facts.postgres.teardown`); other stores' tables are never
        touched. Returns how many of its tables there were.

        For tearing down a tenant: stop the processes using the store first (a
        call running meanwhile fails, or makes its table again). This store can be
        used again afterwards and starts empty; window, item and vector stores
        taken from it before must be taken again."""
        from fastaiagent.facts.postgres.teardown import drop_family

        self.close()
        self._health.check(_PAUSED)
        try:
            conn = psycopg.connect(self.url, autocommit=True, **self._connect_kwargs)
        except psycopg.Error as exc:
            raise self._cannot_connect(exc) from exc
        try:
            with conn:
                dropped = drop_family(conn, self.table)
        except Exception as exc:
            mapped = self._unavailable(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        self._health.succeeded()
        self._schema_ready = False
        self._forget_vector_indexes()
        return dropped

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        with self.pool.connection() as conn:
            yield conn

    def _run(self, operation: Callable[[Any], _T]) -> _T:
        """Run ``operation(conn)``; when the server dropped the connection
        (restart, pg_terminate_backend), set the pool aside and retry once on a
        fresh one. Every operation is idempotent, so the retry cannot
        double-apply. What still fails is classified by :meth:`_unavailable`;
        while the server is paused (see :mod:`fastaiagent.facts.outage`) the call
        raises at once."""
        self._health.check(_PAUSED)  # while the server is paused: raise at once
        try:
            pool = self.pool
            try:
                with pool.connection() as conn:
                    result = operation(conn)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if not connection_lost(exc):
                    raise
                self._drop_pool(pool)  # its other connections are likely dead too
                with self.pool.connection() as conn:
                    result = operation(conn)
        except Exception as exc:
            mapped = self._unavailable(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        self._health.succeeded()
        return result

    def _unavailable(self, exc: BaseException) -> BaseException:
        """The one place psycopg errors are classified: a pool timeout, a lost or
        refused connection and the server's other operational failures (shutdown,
        a statement or lock timeout, a full disk) become StoreUnavailableError, a
        ConnectionError; a failed statement is classified by
        :func:`statement_failure`; errors of this library are returned as they are.
        A pool timeout also pauses the server for every store of the process
        (:mod:`fastaiagent.facts.outage`), as a failed connect does; a lost
        connection sets the pool aside, so the next call connects afresh."""
        where = f"({redacted_url(self.url)})"
        if isinstance(exc, psycopg_pool.PoolTimeout):
            self._health.failed(str(exc))
            self._drop_pool(self._holder.pool)
            return StoreUnavailableError(
                f"no Postgres connection for the fact store within {self.timeout} s {where}: {exc}"
            )
        if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
            reason = " ".join(redacted_url(str(exc)).split())
            if connection_lost(exc):
                self._drop_pool(self._holder.pool)
                what, fix = "lost the Postgres connection", "check that the server is up and reachable"
            else:
                what, fix = "Postgres could not complete the call", "retry, or check the server's log"
            return StoreUnavailableError(
                f"{what} for the fact store {where}: {type(exc).__name__}: {reason}; {fix}"
            )
        if isinstance(exc, psycopg.Error):
            return statement_failure(exc, where)
        return exc

    def _compile(self, conn: Any) -> None:
        """Render the fixed queries to strings once, so a call doesn't re-compose them."""
        self._queries = {
            name: query if name == "cols" or isinstance(query, str) else query.as_string(conn)
            for name, query in self._queries.items()
        }

    def _q(self, name: str) -> Any:
        return self._queries[name]

    def _build_queries(self) -> dict[str, Any]:
        t = self._t
        # Empty metadata comes back as NULL: no JSON parse per row on the read path.
        cols = sql.SQL(", ").join(
            [
                sql.SQL("NULLIF(metadata, '{}'::jsonb)") if name == "metadata" else sql.Identifier(name)
                for name in FACT_COLUMNS
            ]
        )
        newest = sql.SQL(
            "SELECT {} FROM {} WHERE scope = %s AND project_id = %s {} "
            "AND superseded_by IS NULL ORDER BY created_at DESC, id DESC LIMIT %s OFFSET %s"
        )
        # md5: a btree entry must stay small, and fact texts run to 10,000 chars.
        active_key = "(scope, scope_id, project_id, md5(fact_key)) WHERE superseded_by IS NULL"
        return {
            "insert": sql.SQL(
                insert_fact("{}", "%s") + " ON CONFLICT " + active_key + " DO NOTHING RETURNING id"
            ).format(t),
            "find_active": sql.SQL(
                "SELECT id, valid_to FROM {} WHERE scope = %s AND scope_id = %s AND project_id = %s "
                "AND md5(fact_key) = md5(%s) AND fact_key = %s AND superseded_by IS NULL"
            ).format(t),
            "get": sql.SQL("SELECT {} FROM {} WHERE id = %s").format(cols, t),
            "find_active_row": sql.SQL(
                "SELECT {} FROM {} WHERE scope = %s AND scope_id = %s AND project_id = %s "
                "AND md5(fact_key) = md5(%s) AND fact_key = %s AND superseded_by IS NULL"
            ).format(cols, t),
            "lock_pair": sql.SQL(
                "SELECT {} FROM {} WHERE id = ANY(%s) ORDER BY id FOR UPDATE"
            ).format(cols, t),
            "mark_superseded": sql.SQL(
                "UPDATE {} SET superseded_by = %s, superseded_at = %s WHERE id = %s"
            ).format(t),
            "mark_replacing": sql.SQL(
                "UPDATE {} SET superseded_by = 0 WHERE id = %s AND superseded_by IS NULL"
            ).format(t),
            **_subject_queries(t),
            "list_scope": newest.format(cols, t, sql.SQL("")),
            "list_scope_valid": newest.format(
                cols,
                t,
                sql.SQL(
                    "AND (valid_from IS NULL OR valid_from <= %s) "
                    "AND (valid_to IS NULL OR valid_to > %s)"
                ),
            ),
            "cols": cols,
        }

    # -- writes ------------------------------------------------------------

    def _add(self, conn: Any, fact: Fact) -> int:
        key = normalize_text(fact.fact)
        params = fact_values(fact, key, Jsonb(fact.metadata))
        # ON CONFLICT waits for a concurrent writer of the same active key; the
        # loop covers the rare case where that row is superseded in between.
        for _ in range(5):
            row = conn.execute(self._q("insert"), params).fetchone()
            if row is not None:
                return int(row[0])
            found = conn.execute(
                self._q("find_active"), (fact.scope, fact.scope_id, fact.project_id, key, key)
            ).fetchone()
            if found is not None and (found[1] is None or found[1] > fact.created_at):
                return int(found[0])
            if found is not None:
                return self._replace_expired(conn, int(found[0]), params, fact.created_at)
        raise ConflictError("could not add the fact: its active row kept changing")

    def _replace_expired(self, conn: Any, expired: int, params: tuple[Any, ...], at: float) -> int:
        """Its text again after it expired: a new row replaces the expired one (which
        leaves the unique active key first; 0 marks it while the new row goes in)."""
        with conn.transaction():
            if not conn.execute(self._q("mark_replacing"), (expired,)).rowcount:
                return self._add_again(conn, params)  # another writer replaced it
            row = conn.execute(self._q("insert"), params).fetchone()
            new_id = int(row[0])
            conn.execute(self._q("mark_superseded"), (new_id, at, expired))
            return new_id

    def _add_again(self, conn: Any, params: tuple[Any, ...]) -> int:
        found = conn.execute(
            self._q("find_active"), (params[2], params[3], params[4], params[1], params[1])
        ).fetchone()
        if found is None:
            raise ConflictError("could not add the fact: its active row kept changing")
        return int(found[0])

    def add(self, fact: Fact) -> int:
        """Store ``fact`` and return its id; the same normalised text in the same
        subject returns the one active row's id, also under concurrent writers."""
        fact = validate_for_write(fact)
        return self._run(lambda conn: self._add(conn, fact))

    def _supersede(self, conn: Any, old_id: int, new_id: int, at: float) -> None:
        rows = conn.execute(self._q("lock_pair"), ([old_id, new_id],)).fetchall()
        by_id = {fact.id: fact for fact in map(_row_to_fact, rows)}
        old = by_id.get(old_id)
        check_supersede(old, by_id.get(new_id), old_id, new_id)
        if old is not None and old.superseded_by != new_id:  # else: keep the first time
            conn.execute(self._q("mark_superseded"), (new_id, at, old_id))

    def supersede(self, old_id: int, new_id: int, *, at: float | None = None) -> None:
        """Mark ``old_id`` replaced by ``new_id`` (same subject; no self or cycle)."""
        old_id, new_id = check_fact_id(old_id), check_fact_id(new_id)
        when = moment_or_now(at)

        def run(conn: Any) -> None:
            with conn.transaction():
                self._supersede(conn, old_id, new_id, when)

        self._run(run)

    def update(self, new: Fact, old_id: int) -> int:
        """Add ``new`` and supersede ``old_id`` with it, in one transaction."""
        new = validate_for_write(new)
        old_id = check_fact_id(old_id)

        def run(conn: Any) -> int:
            with conn.transaction():
                new_id = self._add(conn, new)
                if new_id != old_id:
                    self._supersede(conn, old_id, new_id, new.created_at)
                return new_id

        return self._run(run)

    def expire(self, scope: str, scope_id: str, project_id: str, fact_id: int, at: float) -> bool:
        """Set an active fact's ``valid_to`` to ``at``; False when it is not there."""
        where, params = self._where(delete_selector(scope, scope_id, project_id), active=True)
        query = sql.SQL("UPDATE {} SET valid_to = %s WHERE {} AND id = %s").format(self._t, where)
        values = [moment_or_now(at), *params, check_fact_id(fact_id)]
        return self._run(lambda conn: bool(conn.execute(query, values).rowcount))

    def prune_history(
        self, before: float, *, project_id: str | None = None, limit: int = DELETE_BATCH
    ) -> int:
        """Delete up to ``limit`` facts expired or superseded before ``before`` (by index)."""
        cutoff, project, limit = history_cutoff(before, project_id, limit)
        tenant = sql.SQL("" if project is None else " AND project_id = %s")
        extra = [] if project is None else [project]
        total = 0
        for where in (
            "superseded_by IS NULL AND valid_to IS NOT NULL AND valid_to <= %s",
            "superseded_by IS NOT NULL AND superseded_at <= %s",
        ):
            query = sql.SQL(
                "DELETE FROM {t} WHERE id IN (SELECT id FROM {t} WHERE {w}{tenant} LIMIT %s)"
            ).format(t=self._t, w=sql.SQL(where), tenant=tenant)
            values: list[Any] = [cutoff, *extra, limit - total]
            total += self._run(partial(_rowcount, query, values))
            if total >= limit:
                break
        return total

    def delete_rows(self, selector: Selector, key: str | None, fact_id: int | None) -> int:
        """Hard-delete in statements of at most :attr:`delete_batch` rows, each its own
        short transaction; returns how many went. ``key`` removes every row with that
        normalised text, active or superseded (through the text index)."""
        where, params = self._where(selector, active=False)
        if key is not None:  # every row of this text, history too: the text index
            where = sql.SQL("{} AND md5(fact_key) = md5(%s) AND fact_key = %s").format(where)
            params += [key, key]
        if fact_id is not None:
            where = sql.SQL("{} AND id = %s").format(where)
            params.append(fact_id)
        step = sql.SQL(
            "DELETE FROM {t} WHERE id IN (SELECT id FROM {t} WHERE {w} LIMIT %s)"
        ).format(t=self._t, w=where)
        batch, total = self.delete_batch, 0
        while True:
            # One call per step: a lost connection retries only that step, and
            # every committed step stays committed (a repeat finishes the rest).
            deleted = self._run(lambda conn: int(conn.execute(step, [*params, batch]).rowcount))
            total += deleted
            if deleted < batch:
                return total

    def prune_learned(self, scope: str, scope_id: str, project_id: str = "", *, keep: int) -> int:
        """Delete the oldest run-learned active facts beyond ``keep``; returns the count."""
        integer("keep", keep, minimum=0)
        where, params = self._where(delete_selector(scope, scope_id, project_id), active=True)
        query = sql.SQL(
            "DELETE FROM {t} WHERE id IN (SELECT id FROM {t} WHERE {w} AND source = %s "
            "ORDER BY created_at DESC, id DESC OFFSET %s)"
        ).format(t=self._t, w=where)
        return self._run(
            lambda conn: int(conn.execute(query, [*params, SOURCE_CONVERSATION, keep]).rowcount)
        )

    # -- reads -------------------------------------------------------------

    def _where(self, selector: Selector, *, active: bool) -> tuple[Any, list[Any]]:
        where, params = selector_where(selector, active_only=active, mark="%s")
        return sql.SQL(where), params

    def get(self, fact_id: int) -> Fact | None:
        """The fact with this id, active or superseded, or None."""
        fact_id = check_fact_id(fact_id)

        def run(conn: Any) -> Fact | None:
            row = conn.execute(self._q("get"), (fact_id,)).fetchone()
            return _row_to_fact(row) if row else None

        return self._run(run)

    def read_active(
        self, selector: Selector, limit: int | None, offset: int, now: float | None, include_expired: bool
    ) -> list[Fact]:
        """Active facts of a subject valid at ``now``, newest first; ``"*"`` reads
        every subject."""
        scope, scope_id, project_id = selector.scope, selector.scope_id or "", selector.project_id
        when = moment_or_now(now)
        if selector.scope_id is None:
            params: list[Any] = [selector.scope, selector.project_id]
            if include_expired:
                query = self._q("list_scope")
            else:
                query, params = self._q("list_scope_valid"), [*params, when, when]
            params += [limit, offset]
            return self._run(lambda conn: [_row_to_fact(r) for r in conn.execute(query, params)])
        subject = [scope, scope_id, project_id]
        if include_expired:
            query, params = self._q("list_subject_all"), [*subject, _ALWAYS, limit, offset]
        else:
            wanted = None if limit is None else limit + offset
            query = self._q("list_subject")
            params = [*subject, when, wanted, *subject, when, when, wanted, limit, offset]
        return self._run(
            lambda conn: [
                Fact(r[0], scope, scope_id, project_id, r[1], r[2], r[3], r[4] or {}, r[5], r[6], None, r[7], r[8])
                for r in conn.execute(query, params)
            ]
        )

    def read_as_of(self, selector: Selector, when: float, limit: int | None, offset: int) -> list[Fact]:
        """What the store held for the subject at ``when`` (an audit read of its rows)."""
        where, params = self._where(selector, active=False)
        query = sql.SQL(
            "SELECT {} FROM {} WHERE {} AND " + as_of_clause("%s")
            + " ORDER BY created_at DESC, id DESC LIMIT %s OFFSET %s"
        ).format(self._q("cols"), self._t, where)
        params += [when] * 4 + [limit, offset]
        return self._run(lambda conn: [_row_to_fact(r) for r in conn.execute(query, params)])

    def replaced(self, fact_id: int) -> list[Fact]:
        """The facts ``fact_id`` superseded directly (the ``replaced`` index)."""
        query = sql.SQL(
            "SELECT {} FROM {} WHERE superseded_by = %s ORDER BY created_at DESC, id DESC"
        ).format(self._q("cols"), self._t)
        wanted = check_fact_id(fact_id)
        return self._run(lambda conn: [_row_to_fact(r) for r in conn.execute(query, (wanted,))])

    def find_active(self, scope: str, scope_id: str, project_id: str, text: str) -> Fact | None:
        """The subject's active fact with this normalised text (the unique active-key index)."""
        read_selector(scope, scope_id, project_id)  # checks the scope and the id types
        key = check_fact_text(text)
        params = (scope, scope_id, project_id, key, key)

        def run(conn: Any) -> Fact | None:
            row = conn.execute(self._q("find_active_row"), params).fetchone()
            return _row_to_fact(row) if row else None

        return self._run(run)

    def browse_facts(self, wanted: BrowseFilter) -> list[Fact]:
        """Facts across subjects, newest first; filters apply before the limit."""
        parts, params = browse_where(wanted, mark="%s", like="ILIKE")
        query = sql.SQL(
            "SELECT {} FROM {} WHERE {} ORDER BY created_at DESC, id DESC LIMIT %s OFFSET %s"
        ).format(self._q("cols"), self._t, sql.SQL(" AND ".join(parts) or "TRUE"))
        params += [wanted.limit, wanted.offset]
        return self._run(lambda conn: [_row_to_fact(r) for r in conn.execute(query, params)])

    def subjects(self, *, include_superseded: bool = False) -> list[SubjectCount]:
        """Every ``scope:scope_id`` (per project) with its fact count."""
        where = sql.SQL("" if include_superseded else "WHERE superseded_by IS NULL")
        query = sql.SQL(
            "SELECT scope, scope_id, project_id, COUNT(*) FROM {} {} "
            "GROUP BY scope, scope_id, project_id ORDER BY scope, scope_id, project_id"
        ).format(self._t, where)
        return self._run(
            lambda conn: [SubjectCount(r[0], r[1], r[2], int(r[3])) for r in conn.execute(query)]
        )

class PostgresTable:
    """A table of its own beside a :class:`PostgresFactStore`'s (the item and window
    stores), on the store's pool. A subclass sets ``_q`` (its statements, with
    ``create`` and ``index`` for the first schema step, :meth:`_create_table`)
    and ``_schema``, whose steps run on the first call. ``table`` None: the one
    ``table_for`` names beside the store's fact table."""

    _q: dict[str, Any]
    _schema: Schema

    def __init__(self, store: PostgresFactStore, table: str | None, table_for: Callable[[str], str]) -> None:
        if not isinstance(store, PostgresFactStore):
            raise InvalidTypeError(
                f"{type(self).__name__} needs a PostgresFactStore, got {type(store).__name__}"
            )
        table = table or table_for(store.table)
        if not table.replace("_", "").isalnum() or not table[0].isalpha() or len(table) > 60:
            raise InvalidValueError(f"table {table!r} must be a plain identifier of at most 60 chars")
        self.store = store
        self.table = table
        self._ready = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(table={self.table!r})"

    def _create_table(self, conn: Any) -> None:
        """Schema step 1 (under the table's advisory lock, see facts/schema.py)."""
        with conn.transaction():
            conn.execute(self._q["create"])
            conn.execute(self._q["index"])

    def _run(self, operation: Callable[[Any], _T]) -> _T:
        """``operation(conn)`` on the store's pool (see :meth:`PostgresFactStore._run`),
        the table brought to its schema version on the first call."""

        def run(conn: Any) -> _T:
            if not self._ready:
                where = f"the database at {redacted_url(self.store.url)}"
                with self.store.schema_work(conn):
                    migrate_postgres(conn, self._schema, self.table, where)
                self._ready = True
            return operation(conn)

        return self.store._run(run)


def _subject_queries(t: Any) -> dict[str, Any]:
    """One subject's reads (the per-turn read): scope, id and project are known and the
    rows are active, so only the varying columns cross the wire. One round trip: the
    newest open-ended facts merged with the still-valid ones that end, each from its
    own partial index, so no expired row is read."""
    open_ended = sql.SQL(_SUBJECT_SELECT + "AND valid_to IS NULL {order}")
    ending = sql.SQL(_SUBJECT_SELECT + "AND valid_to IS NOT NULL AND valid_to > %s {order}")
    return {
        "list_subject": sql.SQL(
            "({open}) UNION ALL ({ending}) ORDER BY 7 DESC, 6 DESC LIMIT %s OFFSET %s"
        ).format(
            open=open_ended.format(t, order=sql.SQL(_NEWEST)),
            ending=ending.format(t, order=sql.SQL(_NEWEST)),
        ),
        "list_subject_all": sql.SQL(_SUBJECT_SELECT + _NEWEST + " OFFSET %s").format(t),
    }


def _rowcount(query: Any, values: list[Any], conn: Any) -> int:
    return int(conn.execute(query, values).rowcount)


def connection_lost(exc: BaseException) -> bool:
    """Whether a psycopg error means the connection is gone (lost, refused, or the
    server shutting it down) rather than a failed statement on a live connection."""
    if isinstance(exc, psycopg.InterfaceError):  # "the connection is closed"
        return True
    state = getattr(exc, "sqlstate", None)
    # No SQLSTATE: the client saw the socket fail. 08: connection exception.
    # 57P01-57P03: admin shutdown (pg_terminate_backend), crash shutdown, cannot connect now.
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


# Words of a refused connect that mean the URL, not the server, is wrong.
_REFUSED_CONFIG = (
    "password authentication failed",
    "authentication failed",
    "does not exist",  # the role or the database
    "no pg_hba.conf entry",
    "permission denied",
    "password is required",
    "unrecognized configuration parameter",  # the URL's options=-c ...
)
# A value of the URL libpq refused when connecting (a port or an sslmode it cannot use).
_REFUSED_VALUE = re.compile(r"invalid (?:\w+ )*value|invalid port|invalid .* option", re.IGNORECASE)


def statement_failure(exc: Exception, where: str) -> FastAIAgentError:
    """The library's error for a statement the server refused (``where`` names the
    server, password masked): no permission -> StoreConfigError; a table or column
    missing (dropped or changed outside fastaiagent) or data failing the server's
    checks -> StoreCorruptError; the rest -> StoreUnavailableError."""
    state = getattr(exc, "sqlstate", None) or ""
    reason = " ".join(redacted_url(str(exc)).split()) or type(exc).__name__
    said = f"({type(exc).__name__}: {reason})"
    if state == "42501" or state.startswith("28"):
        return StoreConfigError(
            f"the Postgres user of the fact store's URL {where} may not do what the store "
            f"needs {said}: grant it the rights on the store's tables, or use another user"
        )
    if state in ("42P01", "42703", "42704"):
        return StoreCorruptError(
            f"a table of the fact store {where} is missing or was changed outside "
            f"fastaiagent {said}: restore it from a backup, or drop it and restart so "
            "it is created again"
        )
    if state.startswith("XX"):
        return StoreCorruptError(
            f"the Postgres server {where} found the fact store's data damaged {said}: "
            "restore the table from a backup (see the server's log)"
        )
    if state in ("42P05", "26000"):  # a prepared statement taken, or unknown, on this connection
        return StoreConfigError(
            f"the fact store's connections to {where} do not keep their session {said}: "
            "behind a transaction-mode pooler such as PgBouncer, pass pooler='transaction' "
            "(or ?pooler=transaction in the location URL)"
        )
    if state == "2BP01":  # destroy(): something of another owner's is built on a table
        return UsageError(
            f"other objects in the database {where} depend on a table of the fact store "
            f"{said}: drop them (or make them independent) first, then destroy again"
        )
    if state == "25006":
        return StoreUnavailableError(
            f"the Postgres server {where} is a read-only standby {said}: point the URL at the primary"
        )
    return StoreUnavailableError(
        f"Postgres could not complete the call for the fact store {where} {said}; retry, "
        "or check the server's log"
    )


