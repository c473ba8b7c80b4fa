"""RedisFactStore: durable facts in Redis, read through newest-first sorted indexes.

Key layout under ``<prefix>`` (every variable part escaped, so an id that
contains ``:`` can never collide with another subject):

- ``<prefix>:seq`` - the id counter
- ``<prefix>:fact:<id>`` - one hash per fact (active or superseded); its ``row``
  field is the fact as one JSON array (see ``ROW_FIELDS``)
- ``<prefix>:active:<project>:<scope>:<scope_id>`` - a subject's active ids, newest first
- ``<prefix>:rows:<project>:<scope>:<scope_id>`` - a subject's active facts as
  rows, newest first (member: zero-padded id + row), so reading a subject is
  one ZREVRANGE with nothing to look up per fact
- ``<prefix>:scope:<project>:<scope>`` - a scope's active ids across subjects (``"*"`` reads)
- ``<prefix>:hist:<project>:<scope>:<scope_id>`` - every id of a subject (history, delete)
- ``<prefix>:key:<project>:<scope>:<scope_id>:<digest>`` - active id of a normalised text
- ``<prefix>:all`` - every id, newest first (browse); ``<prefix>:subjects`` - known subjects
- ``<prefix>:layout`` - the layout version, set once the namespace is indexed

Sorted-set members are (or start with) zero-padded ids, scored by
``created_at``, so facts written in the same instant still come back newest
(highest id) first. Every multi-key change runs as one MULTI/EXEC
transaction guarded by WATCH, so a crash or a dropped connection leaves
nothing half-written. The rows are written in the same transactions as the
active index, so the two always agree; the upgrade of an older namespace (and
:meth:`RedisFactStore.reindex`) builds them from the fact hashes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from fastaiagent._optional import require
from fastaiagent.errors import ConflictError, InvalidValueError, StoreUnavailableError
from fastaiagent.facts.fact import SOURCE_CONVERSATION, Fact
from fastaiagent.facts.scoping import (
    Selector,
    check_fact_id,
    check_fact_text,
    check_limit,
    check_supersede,
    delete_selector,
    normalize_text,
    read_selector,
    validate_for_write,
)
from fastaiagent.facts.store import SubjectCount

redis_lib = require("redis", "redis")

LAYOUT_VERSION = "3"  # 3: per-subject rows (2: indexes and a doc field; 1: bare hashes)
_MAX_TRANSACTION_ATTEMPTS = 200
_T = TypeVar("_T")

# A row lists these Fact fields in the dataclass's own order, so building a
# Fact from a row is one positional call (``superseded_by`` is None: rows are
# only read for active facts).
ROW_FIELDS = (
    "fact",
    "scope",
    "scope_id",
    "project_id",
    "confidence",
    "source",
    "source_trace_id",
    "metadata",
    "id",
    "created_at",
)
if tuple(f.name for f in dataclasses.fields(Fact))[: len(ROW_FIELDS)] != ROW_FIELDS:
    raise ImportError("Fact's fields changed: update ROW_FIELDS in fastaiagent.facts.redis")
_ROW_LEN = len(ROW_FIELDS)

# Reads the newest active facts of one sorted index in a single round trip,
# skipping entries whose hash is gone or superseded (left by another writer),
# so ``limit=n`` returns n facts whenever n exist. The reply is one JSON array
# of rows, parsed in one call; ``[id]`` stands for a fact with no row (an
# older writer's), to read field by field.
_READ_NEWEST = """
local limit = tonumber(ARGV[2])
local out = {}
local start = 0
local batch = 1000
if limit > 0 and limit < batch then batch = limit end
while limit < 0 or #out < limit do
  local ids = redis.call('ZREVRANGE', KEYS[1], start, start + batch - 1)
  if #ids == 0 then break end
  for _, member in ipairs(ids) do
    local id = string.format('%d', tonumber(member))
    local h = redis.call('HMGET', ARGV[1] .. id, 'row', 'superseded_by', 'scope')
    if h[3] and (not h[2] or h[2] == '') then
      out[#out + 1] = h[1] or ('[' .. id .. ']')
      if #out == limit then break end
    end
  end
  start = start + batch
end
return '[' .. table.concat(out, ',') .. ']'
"""

# Drops the rows of one subject that no longer match an active fact hash
# (superseded, deleted or rewritten by another writer), and the active-index
# entries of facts that are gone or superseded. Checks at most ARGV[3] rows
# from rank ARGV[2] per call, so a huge subject never blocks the server long;
# returns the rank to go on from, or -1 when done.
# KEYS: rows, active index, scope index; ARGV[1]: the fact key prefix.
_PRUNE_ROWS = """
local start, count = tonumber(ARGV[2]), tonumber(ARGV[3])
local entries = redis.call('ZRANGE', KEYS[1], start, start + count - 1)
local kept = 0
for _, entry in ipairs(entries) do
  local member = string.sub(entry, 1, 20)
  local h = redis.call('HMGET', ARGV[1] .. string.format('%d', tonumber(member)),
                       'superseded_by', 'scope', 'row')
  local live = h[2] and (not h[1] or h[1] == '')
  if not live then
    redis.call('ZREM', KEYS[2], member)
    redis.call('ZREM', KEYS[3], member)
  end
  if not live or h[3] ~= string.sub(entry, 21) or not redis.call('ZSCORE', KEYS[2], member) then
    redis.call('ZREM', KEYS[1], entry)
  else
    kept = kept + 1
  end
end
if #entries < count then return -1 end
return start + kept
"""

# Raises the id counter to at least ARGV[1] (after indexing older facts).
_RAISE_SEQ = """
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
return 1
"""


def escape_part(part: str) -> str:
    """Escape one key part: ``%`` and ``:`` are percent-encoded, nothing else changes."""
    return part.replace("%", "%25").replace(":", "%3A")


def unescape_part(part: str) -> str:
    return part.replace("%3A", ":").replace("%25", "%")


def _glob_escape(text: str) -> str:
    """Escape SCAN MATCH metacharacters so a prefix matches only itself."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


_ID_WIDTH = 20  # digits of a sorted-set member; the Lua scripts hard-code it too


def _member(fact_id: int) -> str:
    return str(fact_id).zfill(_ID_WIDTH)


def _parse_fact(fact_id: int, raw: dict[str, str]) -> Fact:
    superseded = raw.get("superseded_by") or ""
    return Fact(
        id=fact_id,
        fact=raw.get("fact", ""),
        scope=raw.get("scope", "agent"),
        scope_id=raw.get("scope_id", ""),
        project_id=raw.get("project_id", ""),
        confidence=float(raw.get("confidence") or 1.0),
        source=raw.get("source") or "manual",
        source_trace_id=raw.get("source_trace_id") or None,
        created_at=float(raw.get("created_at") or 0.0),
        superseded_by=int(superseded) if superseded else None,
        metadata=json.loads(raw["metadata"]) if raw.get("metadata") else {},
    )


def _row(fact_id: int, fact: Fact) -> str:
    """The fact as one JSON array of its ``ROW_FIELDS`` (the read path's format)."""
    return json.dumps(
        [
            fact.fact,
            fact.scope,
            fact.scope_id,
            fact.project_id,
            float(fact.confidence),
            fact.source,
            fact.source_trace_id or None,
            fact.metadata,
            fact_id,
            float(fact.created_at),
        ],
        separators=(",", ":"),
    )


class RedisFactStore:
    """Facts in Redis under ``prefix`` (escaped; default ``fastaiagent``).

    The first use of a namespace written by an older SDK (fact hashes with no
    index entries) indexes those facts once; call :meth:`reindex` again if an
    old writer keeps writing. An unreachable server raises ConnectionError.
    ``client`` lets you pass your own ``redis.Redis`` (it must be created with
    ``decode_responses=True``); otherwise one is built from ``url``.
    """

    def __init__(
        self,
        url: str,
        prefix: str = "fastaiagent",
        *,
        socket_timeout: float = 10.0,
        client: Any = None,
    ) -> None:
        if not isinstance(url, str) or not url:
            raise InvalidValueError("url must be a non-empty redis:// or rediss:// URL")
        if not isinstance(prefix, str) or not prefix:
            raise InvalidValueError("prefix must be a non-empty string")
        if client is not None and not client.get_encoder().decode_responses:
            raise InvalidValueError("pass a redis.Redis created with decode_responses=True")
        self.url = url
        self.prefix = escape_part(prefix)
        # Names the connections in CLIENT LIST, so operators can tell them apart.
        self.client_name = "fastaiagent-" + "".join(
            c if c.isalnum() or c in "-_." else "_" for c in prefix
        )
        self._client = client or redis_lib.Redis.from_url(
            url,
            client_name=self.client_name,
            decode_responses=True,
            socket_timeout=socket_timeout,
            socket_connect_timeout=min(socket_timeout, 5.0),
        )
        self._read_newest = self._client.register_script(_READ_NEWEST)
        self._prune_rows = self._client.register_script(_PRUNE_ROWS)
        self._raise_seq = self._client.register_script(_RAISE_SEQ)
        self._layout_checked = False
        self._layout_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RedisFactStore(prefix={self.prefix!r})"

    # -- keys --------------------------------------------------------------

    def _k(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    def _fact_key(self, fact_id: int | str) -> str:
        return self._k("fact", str(fact_id))

    def _subject(self, scope: str, scope_id: str, project_id: str) -> tuple[str, str, str]:
        return escape_part(project_id), escape_part(scope), escape_part(scope_id)

    def _active_key(self, scope: str, scope_id: str, project_id: str) -> str:
        return self._k("active", *self._subject(scope, scope_id, project_id))

    def _rows_key(self, scope: str, scope_id: str, project_id: str) -> str:
        return self._k("rows", *self._subject(scope, scope_id, project_id))

    def _hist_key(self, scope: str, scope_id: str, project_id: str) -> str:
        return self._k("hist", *self._subject(scope, scope_id, project_id))

    def _scope_key(self, scope: str, project_id: str) -> str:
        return self._k("scope", escape_part(project_id), escape_part(scope))

    def _content_key(self, fact: Fact, key: str) -> str:
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]
        return self._k("key", *self._subject(fact.scope, fact.scope_id, fact.project_id), digest)

    def _subject_member(self, scope: str, scope_id: str, project_id: str) -> str:
        return ":".join(self._subject(scope, scope_id, project_id))

    # -- plumbing ----------------------------------------------------------

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except (redis_lib.ConnectionError, redis_lib.TimeoutError) as exc:
            raise StoreUnavailableError(f"cannot reach Redis for the fact store: {exc}") from exc

    def _call(self, operation: Callable[[], _T]) -> _T:
        with self._errors():
            self._ensure_layout()
            return operation()

    def _transact(self, func: Callable[[Any], _T], *watch: str) -> _T:
        """Run ``func(pipe)`` as WATCH + MULTI/EXEC, retried when a watched key
        changes. A connection lost mid-transaction is an error, not a retry:
        Redis discarded the queued commands, so nothing was written."""
        for attempt in range(_MAX_TRANSACTION_ATTEMPTS):
            with self._client.pipeline(transaction=True) as pipe:
                try:
                    if watch:
                        pipe.watch(*watch)
                    value = func(pipe)
                    pipe.execute()
                    return value
                except redis_lib.WatchError as exc:
                    if "occurred while watching" in str(exc):
                        raise StoreUnavailableError(
                            f"lost the Redis connection mid-write: {exc}"
                        ) from exc
            if attempt >= 8:  # heavy contention: back off a little
                time.sleep(0.001 * min(attempt, 20))
        raise ConflictError("gave up after too many concurrent changes to the same keys")

    def _ensure_layout(self) -> None:
        if self._layout_checked:
            return
        with self._layout_lock:
            if self._layout_checked:
                return
            if self._client.get(self._k("layout")) != LAYOUT_VERSION:
                self._reindex()
                self._client.set(self._k("layout"), LAYOUT_VERSION)
            self._layout_checked = True

    def close(self) -> None:
        """Disconnect; the client reconnects on its next use."""
        self._client.close()

    # -- writes ------------------------------------------------------------

    def _fields(self, fact: Fact, key: str) -> dict[str, Any]:
        return {
            "fact": fact.fact,
            "fact_key": key,
            "scope": fact.scope,
            "scope_id": fact.scope_id,
            "project_id": fact.project_id,
            "confidence": repr(float(fact.confidence)),
            "source": fact.source,
            "source_trace_id": fact.source_trace_id or "",
            "created_at": repr(float(fact.created_at)),
            "superseded_by": "",
            "metadata": json.dumps(fact.metadata),
        }

    def _queue_create(self, pipe: Any, fact_id: int, fact: Fact, key: str) -> None:
        subject = (fact.scope, fact.scope_id, fact.project_id)
        member = {_member(fact_id): fact.created_at}
        row = _row(fact_id, fact)
        pipe.hset(self._fact_key(fact_id), mapping={**self._fields(fact, key), "row": row})
        pipe.set(self._content_key(fact, key), fact_id)
        pipe.zadd(self._active_key(*subject), member)
        pipe.zadd(self._rows_key(*subject), {_member(fact_id) + row: fact.created_at})
        pipe.zadd(self._scope_key(fact.scope, fact.project_id), member)
        pipe.zadd(self._k("all"), member)
        pipe.sadd(self._hist_key(*subject), fact_id)
        pipe.sadd(self._k("subjects"), self._subject_member(*subject))

    def _queue_retire(
        self, pipe: Any, old: Fact, row: str, new_id: int, drop_content: bool
    ) -> None:
        assert old.id is not None
        pipe.hset(self._fact_key(old.id), "superseded_by", new_id)
        pipe.zrem(self._active_key(old.scope, old.scope_id, old.project_id), _member(old.id))
        pipe.zrem(self._rows_key(old.scope, old.scope_id, old.project_id), _member(old.id) + row)
        pipe.zrem(self._scope_key(old.scope, old.project_id), _member(old.id))
        if drop_content:
            pipe.delete(self._content_key(old, normalize_text(old.fact)))

    def _read_fact(self, pipe: Any, fact_id: int) -> Fact | None:
        raw = pipe.hgetall(self._fact_key(fact_id))
        return _parse_fact(fact_id, raw) if raw else None

    def _stored_row(self, pipe: Any, fact: Fact) -> str:
        """The row a fact was written with (its rows-index member is id + row)."""
        assert fact.id is not None
        return pipe.hget(self._fact_key(fact.id), "row") or _row(fact.id, fact)

    def _active_id(self, pipe: Any, content_key: str) -> int | None:
        """The id the content key names, when that fact still exists and is active."""
        current = pipe.get(content_key)
        if current is None:
            return None
        if pipe.hget(self._fact_key(current), "superseded_by") == "":
            return int(current)
        return None

    def add(self, fact: Fact) -> int:
        """Store ``fact`` and return its id; the same normalised text in the same
        subject returns the one active fact's id, also under concurrent writers."""
        fact = validate_for_write(fact)
        key = normalize_text(fact.fact)
        content = self._content_key(fact, key)

        def attempt(pipe: Any) -> int:
            existing = self._active_id(pipe, content)
            if existing is not None:
                return existing
            fact_id = int(pipe.incr(self._k("seq")))
            pipe.multi()
            self._queue_create(pipe, fact_id, fact, key)
            return fact_id

        return self._call(lambda: self._transact(attempt, content))

    def supersede(self, old_id: int, new_id: int) -> None:
        """Mark ``old_id`` replaced by ``new_id`` (same subject; no self or cycle)."""
        old_id, new_id = check_fact_id(old_id), check_fact_id(new_id)

        def attempt(pipe: Any) -> None:
            old, new = self._read_fact(pipe, old_id), self._read_fact(pipe, new_id)
            check_supersede(old, new, old_id, new_id)
            assert old is not None
            if old.superseded_by == new_id:
                return  # already done: repeating it is harmless
            old_content = self._content_key(old, normalize_text(old.fact))
            pipe.watch(old_content)
            drop = pipe.get(old_content) == str(old_id)
            row = self._stored_row(pipe, old)
            pipe.multi()
            self._queue_retire(pipe, old, row, new_id, drop)

        self._call(lambda: self._transact(attempt, self._fact_key(old_id), self._fact_key(new_id)))

    def update(self, new: Fact, old_id: int) -> int:
        """Add ``new`` and supersede ``old_id`` with it, in one MULTI/EXEC."""
        new = validate_for_write(new)
        old_id = check_fact_id(old_id)
        key = normalize_text(new.fact)
        content = self._content_key(new, key)

        def attempt(pipe: Any) -> int:
            existing = self._active_id(pipe, content)
            if existing == old_id:
                return old_id  # updating a fact to its own text changes nothing
            old = self._read_fact(pipe, old_id)
            if existing is not None:
                new_id, candidate = existing, self._read_fact(pipe, existing)
            else:
                new_id = int(pipe.incr(self._k("seq")))
                candidate = Fact(**{**new.__dict__, "id": new_id})
            check_supersede(old, candidate, old_id, new_id)
            assert old is not None
            old_content = self._content_key(old, normalize_text(old.fact))
            pipe.watch(old_content)
            drop = pipe.get(old_content) == str(old_id)
            row = self._stored_row(pipe, old)
            pipe.multi()
            if existing is None:
                self._queue_create(pipe, new_id, new, key)
            if old.superseded_by != new_id:
                self._queue_retire(pipe, old, row, new_id, drop)
            return new_id

        return self._call(lambda: self._transact(attempt, content, self._fact_key(old_id)))

    def _subjects_for(self, selector: Selector) -> list[tuple[str, str, str]]:
        """(scope, scope_id, project_id) of every stored subject the selector covers."""
        if selector.scope_id is not None:
            return [(selector.scope, selector.scope_id, selector.project_id)]
        found = []
        for member in self._client.smembers(self._k("subjects")):
            project, scope, scope_id = (unescape_part(p) for p in member.split(":"))
            if scope == selector.scope and project == selector.project_id:
                found.append((scope, scope_id, project))
        return found

    def _load_raw(self, ids: list[int]) -> list[tuple[Fact, dict[str, str]]]:
        reader = self._client.pipeline(transaction=False)
        for fact_id in ids:
            reader.hgetall(self._fact_key(fact_id))
        return [
            (_parse_fact(i, raw), raw) for i, raw in zip(ids, reader.execute(), strict=False) if raw
        ]

    def _load_facts(self, ids: list[int]) -> list[Fact]:
        return [fact for fact, _ in self._load_raw(ids)]

    def _queue_delete(
        self, pipe: Any, facts: list[Fact], rows: dict[int, str], contents: dict[str, str]
    ) -> None:
        for fact in facts:
            assert fact.id is not None
            subject = (fact.scope, fact.scope_id, fact.project_id)
            member = _member(fact.id)
            pipe.delete(self._fact_key(fact.id))
            pipe.zrem(self._active_key(*subject), member)
            pipe.zrem(self._rows_key(*subject), member + rows[fact.id])
            pipe.zrem(self._scope_key(fact.scope, fact.project_id), member)
            pipe.zrem(self._k("all"), member)
            pipe.srem(self._hist_key(*subject), fact.id)
            content = self._content_key(fact, normalize_text(fact.fact))
            if contents.get(content) == str(fact.id):
                pipe.delete(content)

    def _delete_where(
        self, subjects: list[tuple[str, str, str]], choose: Callable[[list[Fact]], list[Fact]]
    ) -> int:
        """Delete the facts ``choose`` picks from these subjects, atomically."""
        hist_keys = [self._hist_key(*s) for s in subjects]

        def attempt(pipe: Any) -> int:
            ids = sorted({int(i) for key in hist_keys for i in pipe.smembers(key)})
            loaded = self._load_raw(ids)
            rows = {f.id: raw.get("row") or _row(f.id, f) for f, raw in loaded if f.id}
            doomed = choose([fact for fact, _ in loaded])
            contents = [self._content_key(f, normalize_text(f.fact)) for f in doomed]
            if contents:
                pipe.watch(*contents)
            values = dict(zip(contents, pipe.mget(contents), strict=False)) if contents else {}
            remaining = {key: len(pipe.smembers(key)) for key in hist_keys}
            pipe.multi()
            self._queue_delete(pipe, doomed, rows, values)
            gone = {self._hist_key(f.scope, f.scope_id, f.project_id) for f in doomed}
            for subject, key in zip(subjects, hist_keys, strict=False):
                left = remaining[key] - sum(
                    1 for f in doomed if (f.scope, f.scope_id, f.project_id) == subject
                )
                if key in gone and left <= 0:
                    pipe.srem(self._k("subjects"), self._subject_member(*subject))
                    pipe.delete(self._active_key(*subject), self._rows_key(*subject))
            return len(doomed)

        if not hist_keys:
            return 0
        return self._transact(attempt, self._k("subjects"), *hist_keys)

    def delete(
        self,
        scope: str,
        scope_id: str,
        project_id: str = "",
        *,
        fact: str | None = None,
        fact_id: int | None = None,
    ) -> int:
        """Hard-delete a subject's facts and history (or only ``fact`` / ``fact_id``)."""
        selector = delete_selector(scope, scope_id, project_id)
        wanted_key = check_fact_text(fact) if fact is not None else None
        wanted_id = check_fact_id(fact_id) if fact_id is not None else None

        def choose(facts: list[Fact]) -> list[Fact]:
            return [
                f
                for f in facts
                if (wanted_key is None or normalize_text(f.fact) == wanted_key)
                and (wanted_id is None or f.id == wanted_id)
            ]

        return self._call(lambda: self._delete_where(self._subjects_for(selector), choose))

    def prune_learned(self, scope: str, scope_id: str, project_id: str = "", *, keep: int) -> int:
        """Delete the oldest run-learned active facts beyond ``keep``; returns the count."""
        if not isinstance(keep, int) or keep < 0:
            raise InvalidValueError("keep must be an int >= 0")
        selector = delete_selector(scope, scope_id, project_id)

        def choose(facts: list[Fact]) -> list[Fact]:
            learned = [f for f in facts if f.active and f.source == SOURCE_CONVERSATION]
            learned.sort(key=lambda f: (f.created_at, f.id or 0), reverse=True)
            return learned[keep:]

        return self._call(lambda: self._delete_where(self._subjects_for(selector), choose))

    # -- reads -------------------------------------------------------------

    def get(self, fact_id: int) -> Fact | None:
        """The fact with this id, active or superseded, or None."""
        fact_id = check_fact_id(fact_id)
        return self._call(lambda: self._read_fact(self._client, fact_id))

    def _newest(self, index_key: str, limit: int | None) -> list[Fact]:
        """Facts of an active index, read one by one on the server (the slow path)."""
        reply = self._read_newest(
            keys=[index_key], args=[self._k("fact", ""), -1 if limit is None else limit]
        )
        facts = []
        for row in json.loads(reply):
            if len(row) == _ROW_LEN:
                facts.append(Fact(*row))
            elif (fact := self._read_fact(self._client, row[0])) is not None:
                facts.append(fact)
        return facts

    def _subject_newest(self, subject: tuple[str, str, str], limit: int | None) -> list[Fact]:
        """A subject's newest facts from its rows: one ZREVRANGE, one JSON parse."""
        stop = -1 if limit is None else limit - 1
        entries = self._client.zrevrange(self._k("rows", *subject), 0, stop)
        rows = json.loads("[" + ",".join([entry[_ID_WIDTH:] for entry in entries]) + "]")
        return [Fact(*row) for row in rows]

    def list_active(
        self, scope: str, scope_id: str, project_id: str = "", limit: int | None = 50
    ) -> list[Fact]:
        """Active facts of a subject, newest first; ``"*"`` reads every subject."""
        check_limit(limit)
        selector = read_selector(scope, scope_id, project_id)
        if selector is None or limit == 0:
            return []
        if selector.scope_id is None:
            index = self._scope_key(selector.scope, selector.project_id)
            return self._call(lambda: self._newest(index, limit))
        subject = self._subject(selector.scope, selector.scope_id, selector.project_id)
        return self._call(lambda: self._subject_newest(subject, limit))

    def browse(
        self,
        *,
        scope: str | None = None,
        scope_id: str | None = None,
        project_id: str | None = None,
        include_superseded: bool = False,
        limit: int = 50,
        offset: int = 0,
    ) -> list[Fact]:
        """Facts across subjects, newest first; filters apply before the limit."""
        check_limit(limit)

        def keep(f: Fact) -> bool:
            return (
                (scope is None or f.scope == scope)
                and (scope_id is None or f.scope_id == scope_id)
                and (project_id is None or f.project_id == project_id)
                and (include_superseded or f.active)
            )

        def run() -> list[Fact]:
            wanted, skip, start, page = limit, max(0, int(offset)), 0, 500
            out: list[Fact] = []
            while len(out) < wanted:
                members = self._client.zrevrange(self._k("all"), start, start + page - 1)
                if not members:
                    break
                for fact in self._load_facts([int(m) for m in members]):
                    if not keep(fact):
                        continue
                    if skip:
                        skip -= 1
                        continue
                    out.append(fact)
                    if len(out) >= wanted:
                        break
                start += page
            return out

        return self._call(run)

    def subjects(self, *, include_superseded: bool = False) -> list[SubjectCount]:
        """Every ``scope:scope_id`` (per project) with its fact count."""

        def run() -> list[SubjectCount]:
            members = sorted(self._client.smembers(self._k("subjects")))
            parsed = [tuple(unescape_part(p) for p in m.split(":")) for m in members]
            counter = self._client.pipeline(transaction=False)
            for project, scope, scope_id in parsed:
                if include_superseded:
                    counter.scard(self._hist_key(scope, scope_id, project))
                else:
                    counter.zcard(self._active_key(scope, scope_id, project))
            out = [
                SubjectCount(scope, scope_id, project, int(count))
                for (project, scope, scope_id), count in zip(
                    parsed, counter.execute(), strict=False
                )
                if count
            ]
            return sorted(out, key=lambda s: (s.scope, s.scope_id, s.project_id))

        return self._call(run)

    # -- upgrades ----------------------------------------------------------

    def reindex(self) -> int:
        """Index every fact hash in the namespace (e.g. written by an older SDK
        that kept no index entries or rows), then drop rows of facts that are no
        longer active; safe to repeat. Returns how many facts it saw."""
        with self._errors():
            count = self._reindex()
            self._client.set(self._k("layout"), LAYOUT_VERSION)
            return count

    def _scan(self, kind: str) -> Iterator[str]:
        """Keys ``<prefix>:<kind>:*`` of this namespace only."""
        return self._client.scan_iter(match=_glob_escape(self._k(kind)) + ":*", count=1000)

    def _reindex(self) -> int:
        batch: list[str] = []
        seen = highest = 0
        for key in self._scan("fact"):
            if key.rsplit(":", 1)[1].isdigit():
                batch.append(key)
            if len(batch) >= 500:
                seen, highest = self._index_batch(batch, seen, highest)
                batch = []
        if batch:
            seen, highest = self._index_batch(batch, seen, highest)
        if highest:
            self._raise_seq(keys=[self._k("seq")], args=[highest])
        self._prune_stale_rows()
        return seen

    def _index_batch(self, keys: list[str], seen: int, highest: int) -> tuple[int, int]:
        """Index these fact hashes in one MULTI/EXEC. The hashes are WATCHed, so a
        fact another writer supersedes meanwhile is never put back as active."""

        def attempt(pipe: Any) -> tuple[int, int]:
            # Read on a second connection: the WATCH on ``pipe`` still covers it.
            reader = self._client.pipeline(transaction=False)
            for key in keys:
                reader.hgetall(key)
            raws = reader.execute()
            pipe.multi()
            count, top = seen, highest
            for key, raw in zip(keys, raws, strict=False):
                if raw and "fact" in raw:
                    fact_id = self._queue_index(pipe, key, raw)
                    count, top = count + 1, max(top, fact_id)
            return count, top

        return self._transact(attempt, *keys)

    def _queue_index(self, pipe: Any, key: str, raw: dict[str, str]) -> int:
        """Queue the index entries (and row) of one fact hash; returns its id."""
        fact = _parse_fact(int(key.rsplit(":", 1)[1]), raw)
        assert fact.id is not None
        subject = (fact.scope, fact.scope_id, fact.project_id)
        member = _member(fact.id)
        text_key = normalize_text(fact.fact)
        row = raw.get("row") or _row(fact.id, fact)
        wanted = {"fact_key": text_key, "superseded_by": raw.get("superseded_by") or "", "row": row}
        missing = {field: value for field, value in wanted.items() if raw.get(field) != value}
        if missing:  # a repeat reindex writes nothing here
            pipe.hset(key, mapping=missing)
        if "doc" in raw:  # layout 2's row, without the id; no reader needs it now
            pipe.hdel(key, "doc")
        pipe.zadd(self._k("all"), {member: fact.created_at})
        pipe.sadd(self._hist_key(*subject), fact.id)
        pipe.sadd(self._k("subjects"), self._subject_member(*subject))
        if fact.active:
            pipe.zadd(self._active_key(*subject), {member: fact.created_at})
            pipe.zadd(self._scope_key(fact.scope, fact.project_id), {member: fact.created_at})
            pipe.zadd(self._rows_key(*subject), {member + row: fact.created_at})
            pipe.set(self._content_key(fact, text_key), fact.id, nx=True)
        else:
            pipe.zrem(self._active_key(*subject), member)
            pipe.zrem(self._scope_key(fact.scope, fact.project_id), member)
            pipe.zrem(self._rows_key(*subject), member + row)
        return fact.id

    def _prune_stale_rows(self) -> None:
        """Drop rows (and active entries) of facts an older writer superseded or
        deleted; up to 200 subjects a round trip, each checked by atomic steps."""
        rows_prefix = self._k("rows") + ":"
        fact_prefix = self._k("fact", "")
        subjects = self._scan("rows")
        while batch := [key for _, key in zip(range(200), subjects, strict=False)]:
            work: list[tuple[list[str], int]] = []
            for rows_key in batch:
                subject = rows_key[len(rows_prefix) :]  # project:scope:scope_id, escaped
                project, scope, _ = subject.split(":")
                keys = [rows_key, self._k("active", subject), self._k("scope", project, scope)]
                work.append((keys, 0))
            while work:
                pruner = self._client.pipeline(transaction=False)
                for keys, rank in work:
                    self._prune_rows(keys=keys, args=[fact_prefix, rank, 500], client=pruner)
                done = pruner.execute()
                work = [(keys, int(rank)) for (keys, _), rank in zip(work, done, strict=False)]
                work = [(keys, rank) for keys, rank in work if rank >= 0]

    def window_store(self) -> Any:
        """Shared conversation windows on this store's connections (the
        :class:`~fastaiagent.facts.windows.HoldsWindows` capability)."""
        from fastaiagent.facts.redis_windows import RedisWindowStore

        return RedisWindowStore(self)
