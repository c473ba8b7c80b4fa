"""The shared FactStore conformance suite against SQLite, the real Postgres and the real Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fastaiagent.facts.conformance import FactStoreConformance
from fastaiagent.facts.store import FactStore
from fastaiagent.learn import MemoryStore


class TestSQLiteConformance(FactStoreConformance):
    @pytest.fixture
    def store(self, tmp_path) -> Iterator[FactStore]:
        s = MemoryStore(tmp_path / "facts.db")
        yield s
        s.close()


@pytest.mark.postgres
class TestPostgresConformance(FactStoreConformance):
    @pytest.fixture
    def store(self, postgres_url: str, pg_table: str) -> Iterator[FactStore]:
        from fastaiagent.facts.postgres.store import PostgresFactStore

        self.app_name = pg_table
        s = PostgresFactStore(
            f"{postgres_url}?application_name={pg_table}", max_pool_size=4, table=pg_table
        )
        self.url = postgres_url
        yield s
        s.close()

    def break_connections(self, store: FactStore) -> None:
        """pg_terminate_backend on every connection the store's pool holds."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (self.app_name,),
            ).fetchall()
        assert killed, "the store should hold at least one connection"

    def unreachable_store(self) -> FactStore:
        from fastaiagent.facts.postgres.store import PostgresFactStore

        return PostgresFactStore("postgresql://postgres@127.0.0.1:1/test", timeout=2.0)


@pytest.mark.postgres
class TestPgBouncerConformance(FactStoreConformance):
    """Postgres through PgBouncer in transaction pooling mode (``pooler="transaction"``)."""

    @pytest.fixture
    def store(self, pgbouncer_url: str, pg_table: str) -> Iterator[FactStore]:
        from fastaiagent.facts.postgres.store import PostgresFactStore

        s = PostgresFactStore(pgbouncer_url, max_pool_size=4, table=pg_table, pooler="transaction")
        yield s
        s.close()


@pytest.mark.redis
class TestRedisConformance(FactStoreConformance):
    @pytest.fixture
    def store(self, redis_url: str, redis_prefix: str) -> Iterator[FactStore]:
        from fastaiagent.facts.redis.store import RedisFactStore

        s = RedisFactStore(redis_url, prefix=redis_prefix)
        self.url, self.prefix = redis_url, redis_prefix
        yield s
        s.close()

    def break_connections(self, store: FactStore) -> None:
        """CLIENT KILL every connection of the store (its client name)."""
        import redis

        admin = redis.Redis.from_url(self.url)
        own = admin.client_id()
        for client in admin.client_list():
            if int(client["id"]) != own and client.get("name") == getattr(
                store, "client_name", None
            ):
                admin.client_kill_filter(_id=int(client["id"]))
        admin.close()

    def unreachable_store(self) -> FactStore:
        from fastaiagent.facts.redis.store import RedisFactStore

        return RedisFactStore("redis://127.0.0.1:1/0", prefix="unreachable")
