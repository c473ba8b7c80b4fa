"""Location strings, checked before a driver sees them.

A location's query options are fastaiagent's own (``table=``, ``pooler=``,
``prefix=``, ``cluster=``, ``wait_replicas=``) or the driver's (libpq's
connection parameters, redis-py's URL options). An option neither knows is an
:class:`~fastaiagent.errors.InvalidValueError` naming it, the closest option
that exists ("did you mean") and every option there is, at construction: a typo
is never a raw ``TypeError`` from redis-py nor an outage reported by libpq.
SQLite locations take no options; a location close to a supported form
(``sqlite://x.db``, ``postgress://...``) names the form it resembles.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from urllib.parse import parse_qsl, urlsplit

from fastaiagent.errors import InvalidValueError

POSTGRES_OWN = ("table", "pooler")
"""Options fastaiagent reads from a Postgres location (see ``make_fact_store``)."""
REDIS_OWN = ("prefix", "cluster", "wait_replicas")
"""Options fastaiagent reads from a Redis location."""
# redis-py passes a URL option it does not parse on to the connection as text:
# these are the ones a connection takes as text (TLS ones on rediss:// only).
REDIS_TEXT = ("client_name", "username", "password", "encoding", "encoding_errors", "lib_name", "lib_version")
REDIS_TLS_TEXT = (
    "ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_ca_data",
    "ssl_ca_path", "ssl_password", "ssl_ciphers",
)  # fmt: skip
SCHEMES = ("sqlite", "postgres", "postgresql", "redis", "rediss")
FORMS = (
    "'sqlite', 'sqlite:///relative/path.db', 'sqlite:////absolute/path.db', "
    "'postgres://...', 'postgresql://...', 'redis://...', 'rediss://...' or a FactStore instance"
)


def redacted_url(url: str) -> str:
    """``url`` with its passwords masked (in the address and as options), for
    messages and logs."""
    url = re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)
    return re.sub(r"([?&](?:password|sslpassword|ssl_password)=)[^&]*", r"\1***", url)


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``choices``, or ""."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def option_names(url: str) -> list[str]:
    """The names of ``url``'s query options, in order."""
    try:
        query = urlsplit(url).query
    except ValueError as exc:  # e.g. an unclosed [ of an IPv6 host
        raise InvalidValueError(f"{redacted_url(url)} is not a URL: {exc}") from None
    return [key for key, _ in parse_qsl(query, keep_blank_values=True)]


def check_options(
    url: str, own: Sequence[str], driver: str, theirs: Sequence[str], also: Sequence[str] = ()
) -> None:
    """Raise InvalidValueError for the first option of ``url`` that is neither one of
    ``own`` (fastaiagent's) nor of ``theirs`` (the driver's, named ``driver``);
    ``also``: more names a typo may be close to (a store's keyword arguments)."""
    known = {*own, *theirs}
    for name in option_names(url):
        if name in known:
            continue
        ours = ", ".join(own) if own else "none"
        raise InvalidValueError(
            f"{redacted_url(url)}: unknown option {name!r}{did_you_mean(name, {*known, *also})}. "
            f"The options are fastaiagent's ({ours}) and {driver}'s ({', '.join(sorted(theirs))})"
        )


def postgres_options() -> list[str]:
    """libpq's connection parameters, read from the libpq psycopg runs on."""
    from psycopg import pq

    return [option.keyword.decode() for option in pq.Conninfo.get_defaults()]


def check_postgres_url(url: str, own: Sequence[str] = POSTGRES_OWN) -> None:
    """Every option of a Postgres URL is ``own`` or libpq's; a store made directly
    (``PostgresFactStore(url, table=...)``) takes fastaiagent's options as keywords."""
    for name in option_names(url):
        if name in POSTGRES_OWN and name not in own:
            raise InvalidValueError(
                f"{redacted_url(url)}: {name}= is an option of a location string "
                f"(Memory(location=...)); pass it to the store as {name}=... instead"
            )
    check_options(url, own, "libpq", postgres_options(), also=POSTGRES_OWN)


def redis_options(tls: bool) -> list[str]:
    """The options redis-py reads from a ``redis://`` (``tls``: ``rediss://``) URL."""
    from redis.connection import URL_QUERY_ARGUMENT_PARSERS

    parsed = [name for name in URL_QUERY_ARGUMENT_PARSERS if tls or not name.startswith("ssl_")]
    return [*parsed, *REDIS_TEXT, *(REDIS_TLS_TEXT if tls else ())]


def check_redis_url(url: str, own: Sequence[str] = REDIS_OWN) -> None:
    """Every option of a Redis URL is ``own`` or redis-py's (TLS ones on rediss://)."""
    tls = url.startswith("rediss://")
    for name in option_names(url):
        if name in REDIS_OWN and name not in own:
            raise InvalidValueError(
                f"{redacted_url(url)}: {name}= is an option of a location string "
                f"(Memory(location=...)); pass it to the store as {name}=... instead"
            )
        if name.startswith("ssl_") and not tls and name in redis_options(True):
            raise InvalidValueError(
                f"{redacted_url(url)}: {name}= is a TLS option: use a rediss:// URL for TLS"
            )
    check_options(url, own, "redis-py", redis_options(tls), also=REDIS_OWN)
    database = urlsplit(url).path.strip("/")
    if database and not database.isdigit():  # redis-py would quietly use DB 0
        raise InvalidValueError(
            f"{redacted_url(url)}: the path names the DB index and must be a number "
            f"(redis://host:6379/0), got {database!r}"
        )


def unsupported(location: str) -> InvalidValueError:
    """The error for a location string of no supported form, naming the form it
    resembles: ``sqlite://x.db`` (two slashes) -> ``sqlite:///x.db``."""
    scheme, colon, rest = location.partition(":")
    if colon and scheme.lower() == "sqlite":
        path = rest.lstrip("/")
        slashes = len(rest) - len(path)
        if not path:
            hint = "use 'sqlite:///relative/path.db', 'sqlite:////absolute/path.db' or 'sqlite'"
        elif slashes == 1:
            hint = (
                f"use 'sqlite:////{path}' for the absolute path /{path}, or "
                f"'sqlite:///{path}' relative to the working folder"
            )
        else:
            hint = f"use 'sqlite:///{path}' (three slashes: a path relative to the working folder)"
        return InvalidValueError(f"{location!r} is not a SQLite location: {hint}")
    close = did_you_mean(scheme.lower(), SCHEMES) if colon else ""
    return InvalidValueError(f"unsupported location {redacted_url(location)!r}{close}: use {FORMS}")


def check_sqlite_options(url: str) -> None:
    """SQLite locations take no options: a ``?`` starts none (``?mode=ro`` would
    otherwise become part of the file's name)."""
    if "?" in url:
        raise InvalidValueError(
            f"{url!r}: SQLite locations take no options ({url.partition('?')[2]!r}); "
            "name the file only, or make the store yourself: SQLiteFactStore(path, timeout=...)"
        )


__all__ = [
    "POSTGRES_OWN",
    "REDIS_OWN",
    "check_options",
    "check_postgres_url",
    "check_redis_url",
    "check_sqlite_options",
    "did_you_mean",
    "postgres_options",
    "redacted_url",
    "redis_options",
    "unsupported",
]
