"""Every location option is checked before a driver sees it (issue #46): an unknown one
is an InvalidValueError naming it, the closest option that exists and all of them,
raised when the Memory is built (no server is contacted: these hosts do not exist);
a SQLite location close to the supported forms names the form it resembles."""

from __future__ import annotations

import pytest

from fastaiagent import Memory
from fastaiagent.errors import InvalidValueError

pytest.importorskip("psycopg")
pytest.importorskip("redis")


@pytest.mark.parametrize(
    ("location", "said"),
    [
        # Redis: fastaiagent's options, redis-py's, and the cluster's
        ("redis://nowhere.invalid:6379/0?prefx=typo", ["'prefx'", "did you mean 'prefix'", "socket_timeout"]),
        ("redis://nowhere.invalid:6379/0?socket_timout=3", ["did you mean 'socket_timeout'", "prefix"]),
        ("redis://nowhere.invalid:6379/0?cluster=true&wait_replica=2", ["did you mean 'wait_replicas'"]),
        ("redis://nowhere.invalid:6379/0?ssl_ca_certs=/ca.pem", ["TLS option", "rediss://"]),
        ("redis://nowhere.invalid:6379/0?decode_responses=false", ["'decode_responses'", "prefix"]),
        ("redis://nowhere.invalid:6379/zero", ["DB index", "redis://host:6379/0"]),
        ("redis://nowhere.invalid:6379/0?socket_timeout=soon", ["socket_timeout", "nowhere.invalid"]),
        # Postgres: fastaiagent's options (the pooler's too) and libpq's
        ("postgresql://u@nowhere.invalid/db?tabel=x", ["'tabel'", "did you mean 'table'", "sslmode"]),
        ("postgresql://u@nowhere.invalid/db?pooler=transaction&pool=1", ["'pool'", "pooler"]),
        ("postgresql://u@nowhere.invalid/db?pooler=transacton", ["pooler", "'transaction'"]),
        ("postgres://u@nowhere.invalid/db?sslmod=require", ["did you mean 'sslmode'"]),
        ("postgresql://u@nowhere.invalid/db?connect_timeout=soon", ["connect_timeout", "whole seconds"]),
        # SQLite: no options, and the forms it resembles
        ("sqlite://memory.db", ["'sqlite:///memory.db'"]),
        ("sqlite:memory.db", ["'sqlite:///memory.db'"]),
        ("sqlite:/data/memory.db", ["'sqlite:////data/memory.db'"]),
        ("sqlite:///memory.db?mode=ro", ["take no options", "'mode=ro'"]),
        ("postgress://u@h/db", ["did you mean 'postgres'"]),
    ],
)
def test_an_unknown_or_misspelt_option_is_refused_at_construction_naming_the_fix(location, said):
    with pytest.raises(InvalidValueError) as info:
        Memory(location)
    message = str(info.value)
    for words in said:
        assert words in message, message
    assert not isinstance(info.value.__cause__, TypeError)


def test_a_password_in_the_location_is_never_shown():
    for location in (
        "postgresql://u:s3cret@nowhere.invalid/db?tabel=x",
        "redis://:s3cret@nowhere.invalid:6379/0?prefx=x",
        "postgresql://u@nowhere.invalid/db?password=s3cret&tabel=x",
    ):
        with pytest.raises(InvalidValueError) as info:
            Memory(location)
        assert "s3cret" not in str(info.value) and "***" in str(info.value)


def test_the_stores_made_directly_check_their_url_too():
    from fastaiagent.facts.postgres.store import PostgresFactStore
    from fastaiagent.facts.redis.store import RedisFactStore

    with pytest.raises(InvalidValueError, match="did you mean 'prefix'"):
        RedisFactStore("redis://nowhere.invalid:6379/0?prefx=x")
    with pytest.raises(InvalidValueError, match="pass it to the store as table="):
        PostgresFactStore("postgresql://u@nowhere.invalid/db?table=x")
    with pytest.raises(InvalidValueError, match="did you mean 'connect_timeout'"):
        PostgresFactStore("postgresql://u@nowhere.invalid/db?connect_timout=3")
    with pytest.raises(InvalidValueError, match="is not a URL"):
        PostgresFactStore("postgresql://u@[::1/db")
    with pytest.raises(InvalidValueError, match="not a Postgres URL libpq can read"):
        PostgresFactStore("postgresql://u@nowhere.invalid/db%zz")


def test_the_options_that_exist_are_accepted_without_connecting():
    for location in (
        "postgresql://u@nowhere.invalid/db?table=t&pooler=transaction&sslmode=prefer&application_name=a",
        "redis://nowhere.invalid:6379/2?prefix=p&socket_timeout=3&health_check_interval=10&client_name=c",
        "rediss://nowhere.invalid:6379/0?prefix=p&ssl_cert_reqs=none&ssl_ca_certs=/ca.pem",
    ):
        Memory(location)  # builds; the first call would connect
