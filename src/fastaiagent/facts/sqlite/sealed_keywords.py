"""Keyword tokens sealed with a per-namespace secret, so forgetting a namespace
needs no rewrite of the FTS5 index.

FTS5 keeps a deleted row's tokens in its segments until a merge rewrites them,
and SQLite 3.40 has no FTS5 ``secure-delete``; merging every segment after a
large forget held the write lock for 60-80 ms in one step. So the index never
holds a user's words: each namespace has a random secret (``<table>_keys``),
and its keyword tokens and its namespace token are keyed BLAKE2b hashes under
it. BM25 over sealed tokens is the same as over the words (a hash per word,
namespace by namespace). Forgetting a namespace deletes its rows and its secret
(on a ``secure_delete`` page): the hashes left in old segments then match no
word anyone can compute, and FTS5's automerge drops them in its own time.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Iterable, Sequence

from fastaiagent.facts.vectors import keyword_tokens
from fastaiagent.kb.protocols import Chunk

SECRET_BYTES = 16
_TOKEN_BYTES = 6  # 48 bits: a collision within one namespace's vocabulary is ~1e-5 likely


def seal(secret: bytes, term: str) -> str:
    """``term`` as a token of the namespace with ``secret`` (letters and hex digits only)."""
    return (
        "k"
        + hashlib.blake2b(term.encode("utf-8"), key=secret, digest_size=_TOKEN_BYTES).hexdigest()
    )


def sealed_text(secret: bytes, terms: Iterable[str]) -> str:
    """The space-joined sealed tokens of ``terms`` (in order, repeats kept: BM25 counts them)."""
    return " ".join(seal(secret, term) for term in terms)


def namespace_token(secret: bytes) -> str:
    """The namespace as one FTS token (no tokenizer splits it; not derived from its name)."""
    return "n" + hashlib.blake2b(b"namespace", key=secret, digest_size=16).hexdigest()


class NamespaceSecrets:
    """The ``<table>_keys`` table: one random secret per namespace with keyword rows."""

    def __init__(self, table: str) -> None:
        self.table = f"{table}_keys"

    def for_write(self, conn: sqlite3.Connection, namespaces: Iterable[str]) -> dict[str, bytes]:
        """Each namespace's secret, made now if it has none (inside the write's transaction,
        so a concurrent forget either sees the rows or deletes the secret with them)."""
        return {
            namespace: conn.execute(
                f"INSERT INTO {self.table} (namespace, secret) VALUES (?, ?) "
                "ON CONFLICT (namespace) DO UPDATE SET secret = secret RETURNING secret",
                (namespace, os.urandom(SECRET_BYTES)),
            ).fetchone()[0]
            for namespace in namespaces
        }

    def drop(self, conn: sqlite3.Connection, namespace: str) -> None:
        conn.execute(f"DELETE FROM {self.table} WHERE namespace = ?", (namespace,))


def create_secrets(table: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {table}_keys (namespace TEXT PRIMARY KEY, "
        "secret BLOB NOT NULL) WITHOUT ROWID"
    )


def seal_existing_rows(conn: sqlite3.Connection, table: str) -> None:
    """Migration: give every namespace a secret and rewrite its rows' tokens sealed,
    made again from each row's text (so older rows get today's tokenizer too, e.g.
    Chinese as character pairs); the update triggers keep FTS5 and the statistics
    in step. Then 'optimize' once so no segment keeps the plain tokens (freed
    pages zeroed)."""
    conn.execute("PRAGMA secure_delete = ON")
    conn.execute(create_secrets(table))
    namespaces = [row[0] for row in conn.execute(f"SELECT DISTINCT namespace FROM {table}")]
    secrets = NamespaceSecrets(table).for_write(conn, namespaces)
    for namespace, secret in secrets.items():
        rows: Sequence[tuple[int, str, str]] = conn.execute(
            f"SELECT rid, text, metadata FROM {table} WHERE namespace = ?", (namespace,)
        ).fetchall()
        conn.executemany(
            f"UPDATE {table} SET nskey = ?, keywords = ? WHERE rid = ?",
            [(namespace_token(secret), sealed_text(secret, _words(rid, text, metadata)), rid)
             for rid, text, metadata in rows],
        )  # fmt: skip
    if namespaces:
        conn.execute(f"INSERT INTO {table}_fts ({table}_fts) VALUES ('optimize')")


def _words(rid: int, text: str, metadata: str) -> list[str]:
    return keyword_tokens(Chunk(str(rid), text, None, json.loads(metadata or "{}")))


__all__ = [
    "NamespaceSecrets",
    "create_secrets",
    "namespace_token",
    "seal",
    "seal_existing_rows",
    "sealed_text",
]
