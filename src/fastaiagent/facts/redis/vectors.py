"""Durable vectors, keyword postings and cached embeddings in plain Redis (no modules).

Key layout under ``<prefix>:vec:`` (``<ns>`` is the escaped namespace, ``""``
for untagged chunks):

- ``layout`` - this layout's version (``VECTORS_LAYOUT``); ``dim`` - the dimension;
  ``analyzer`` - the text analyzer's version the postings were built with
  (:mod:`fastaiagent.facts.index.reindex`);
  ``dims`` - the sizes of the indexes beside this one (``<prefix>:vec<size>:``, set)
- ``ns`` - namespaces holding chunks (set); ``id`` - chunk id -> ``<ns>`` (hash)
- ``v:<ns>`` - chunk id -> float32 vector bytes (hash)
- ``d:<ns>`` - chunk id -> JSON ``[text, metadata]`` (hash)
- ``tm:<ns>`` - chunk id -> ``"<length> <term> <term> ..."`` (what to unindex)
- ``p:<ns>:<term>`` - postings: chunk id -> ``"<tf> <length>"`` (hash)
- ``m:<ns>`` - ``ver`` (bumped by every change), ``floor``, ``tot`` (total length)
- ``log:<ns>`` - chunk id -> ``ver`` of its last change (sorted set)
- ``rt:<ns>`` - chunk id -> its numeric ``metadata.created_at`` (sorted set, layout 2:
  the chunks of a span of time for ``search_recorded``)

Layouts 3 and 4 change no key: their upgrade indexes messages again with
today's ``kb.bm25.tokenize`` (3: Chinese, Japanese or Korean as character pairs,
a clause was one token; 4: a word's forms stemmed together, "move" and
"moving"), as SQLite and Postgres do at their upgrades.
- ``c:<ns>:<identity>`` - text key -> float32 bytes; ``ci:<ns>`` - those identities

Every write is one Lua script, so a chunk, its postings and the version move
together. A search keeps each namespace's normalised matrix in the process
and brings it up to date with one script call that returns only the chunks
changed since (``log``); reading a whole namespace from Redis on every search
would cost ~25 ms at 10k vectors of 384 dims. ``floor`` marks the oldest
version the log still covers: older process caches reload the namespace.
The keyword side reads the query terms' document counts, the postings of the
rarest and, for the others, their counts of the newest chunks, and scores them
BM25 (as :class:`~fastaiagent.kb.bm25.BM25Index`, the same tokenizer).

The Lua scripts keep a chunk's postings and the statistics BM25 reads (``tot``,
the document count ``HLEN d:<ns>``) in step with the chunk; they never score.
Scoring is Python's, :func:`~fastaiagent.facts.index.keywords.bm25_top`
(the one BM25 of the three stored indexes): in Lua it would be
a second copy of the formula, run while the script blocks the server. The namespace matrices, their
catch-up and the checks of every request are the shared core's
(:mod:`fastaiagent.facts.index`).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from fastaiagent._optional import require
from fastaiagent._validate import positive_int
from fastaiagent.errors import InvalidTypeError, SchemaVersionError
from fastaiagent.facts.index.front import MatrixIndex, bytes_vector, ranked_hits, vector_bytes
from fastaiagent.facts.index.keywords import bm25_top, budget, by_rarity, newest_window
from fastaiagent.facts.index.matrix import Change, NamespaceMatrix, unit_rows
from fastaiagent.facts.index.reindex import analyzer_opened, current_version
from fastaiagent.facts.redis.client import unavailable
from fastaiagent.facts.redis.layout import escape_part, unescape_part
from fastaiagent.facts.redis.store import RedisFactStore
from fastaiagent.facts.redis.vector_spread import VectorSpread
from fastaiagent.facts.vectors import RECORDED_LIMIT, Spans, keyword_tokens, recorded_at
from fastaiagent.kb.protocols import Chunk, Dimension, SearchHit, checked_batch

logger = logging.getLogger("fastaiagent.facts.redis.vectors")

np = require("numpy", "redis")
_client_mod = require("redis.client", "redis")
_NoScript = require("redis.exceptions", "redis").NoScriptError
_NEVER_DECODE = {_client_mod.NEVER_DECODE: True}  # replies read as bytes (vectors)

VECTORS_LAYOUT = "4"
DELTA_LIMIT = 2000  # changed chunks a cache catches up on; more reloads the namespace
_DROP_BATCH = 64  # chunks one delete_namespace step removes (a few ms of Redis at ~12 terms each)
SCAN_STEP = 1000  # vectors one HSCAN of a cold load returns (~1.5 MB at 384 dims)
_T = TypeVar("_T")

# Shared by the write scripts: drop one chunk (vector, text, postings) and log it.
_COMMON = """
local P = ARGV[1]
local C = false  -- a cluster's form (see _cluster): one namespace's slot only
local function compact(ns, ver)
  -- a log far longer than the namespace is mostly tombstones: start afresh
  if redis.call('ZCARD', P .. 'log:' .. ns) > 2 * redis.call('HLEN', P .. 'd:' .. ns) + 1000 then
    redis.call('UNLINK', P .. 'log:' .. ns)  -- freed in the background: no stall
    redis.call('HSET', P .. 'm:' .. ns, 'floor', ver)
  end
end
-- Versions come from one counter of the prefix (never below a namespace's own), so
-- a namespace deleted whole (its meta key gone) and written again starts above any
-- version a process may still hold of it, at a floor that makes that copy reload.
-- A cluster has no counter in the namespace's slot: versions follow the server's
-- clock in microseconds instead (one change takes longer than that), so a namespace
-- written again still starts above what a process holds of its earlier life.
local function changed(ns, id)
  local m = P .. 'm:' .. ns
  local old = tonumber(redis.call('HGET', m, 'ver') or '0')
  local ver
  if C then
    local t = redis.call('TIME')
    ver = math.max(old + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
  else
    ver = redis.call('INCR', P .. 'vc')
    if ver <= old then
      ver = old + 1
      redis.call('SET', P .. 'vc', ver)
    end
  end
  if old == 0 then redis.call('HSET', m, 'floor', ver) end
  redis.call('HSET', m, 'ver', ver)
  redis.call('ZADD', P .. 'log:' .. ns, ver, id)
  return ver
end
-- Cluster: `want` is the namespace the store found in its id map (kept apart).
local function drop(id, want)
  local ns
  if C then
    ns = want
    if redis.call('HEXISTS', P .. 'd:' .. ns, id) == 0 then return 0 end
  else
    ns = redis.call('HGET', P .. 'id', id)
    if not ns or (want and ns ~= want) then return 0 end
  end
  local tm = redis.call('HGET', P .. 'tm:' .. ns, id)
  if tm then
    local first = true
    for word in string.gmatch(tm, '%S+') do
      if first then
        -- 0 - n, not -n: Lua writes -0 as "-0", which HINCRBY refuses
        redis.call('HINCRBY', P .. 'm:' .. ns, 'tot', 0 - tonumber(word))
        first = false
      else
        redis.call('HDEL', P .. 'p:' .. ns .. ':' .. word, id)
      end
    end
    redis.call('HDEL', P .. 'tm:' .. ns, id)
  end
  redis.call('HDEL', P .. 'v:' .. ns, id)
  redis.call('HDEL', P .. 'd:' .. ns, id)
  redis.call('ZREM', P .. 'rt:' .. ns, id)
  compact(ns, changed(ns, id))
  if not C then
    redis.call('HDEL', P .. 'id', id)
    if redis.call('HLEN', P .. 'd:' .. ns) == 0 then redis.call('SREM', P .. 'ns', ns) end
  end
  return 1
end
"""

# ARGV: P, dim, then per chunk: id, ns, vector, doc, "<length> <terms...>", "<tfs...>",
# created_at ("" when not a number). Returns nil, or the stored dimension when it
# differs from ``dim``. Postings and ``tot`` only: BM25 is scored in Python (module doc).
_ADD = (
    _COMMON
    + """
if not C then  -- a cluster's store checks the dimension and maps ids itself
  local dim = redis.call('GET', P .. 'dim')
  if dim and dim ~= ARGV[2] then return dim end
  if not dim then redis.call('SET', P .. 'dim', ARGV[2]) end
end
for i = 3, #ARGV, 7 do
  local id, ns, vec, doc, tm, tfs = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3], ARGV[i+4], ARGV[i+5]
  if C then drop(id, ns) else drop(id, nil) end
  if ARGV[i+6] ~= '' then redis.call('ZADD', P .. 'rt:' .. ns, ARGV[i+6], id) end
  redis.call('HSET', P .. 'v:' .. ns, id, vec)
  redis.call('HSET', P .. 'd:' .. ns, id, doc)
  if not C then redis.call('HSET', P .. 'id', id, ns) end
  redis.call('HSET', P .. 'tm:' .. ns, id, tm)
  local len = string.match(tm, '^(%S+)')
  redis.call('HINCRBY', P .. 'm:' .. ns, 'tot', tonumber(len))
  local tf = string.gmatch(tfs, '%S+')
  local first = true
  for word in string.gmatch(tm, '%S+') do
    if first then first = false
    else redis.call('HSET', P .. 'p:' .. ns .. ':' .. word, id, tf() .. ' ' .. len) end
  end
  changed(ns, id)
  if not C then redis.call('SADD', P .. 'ns', ns) end
end
return false
"""
)

# ARGV: P, want ("" any namespace; else "=" .. ns), ids... Returns how many were there.
_DELETE = (
    _COMMON
    + """
local want = nil
if ARGV[2] ~= '' then want = string.sub(ARGV[2], 2) end
local n = 0
for i = 3, #ARGV do n = n + drop(ARGV[i], want) end
return n
"""
)

# Layout 1 -> 2, one batch of a namespace's chunks at a time. ARGV: P, ns, ids...: each
# chunk still there with a numeric created_at enters ``rt:<ns>`` (atomic with writers).
_RECORD_TIMES = """
local P, ns = ARGV[1], ARGV[2]
for i = 3, #ARGV do
  local doc = redis.call('HGET', P .. 'd:' .. ns, ARGV[i])
  if doc then
    local at = cjson.decode(doc)[2]['created_at']
    if type(at) == 'number' then
      redis.call('ZADD', P .. 'rt:' .. ns, string.format('%.17g', at), ARGV[i])
    end
  end
end
return 1
"""

# ARGV: P, ns. Drops the namespace's cached embeddings and, once it holds no chunk,
# every key named after it (meta, log, times). UNLINK frees big keys in the background.
_CLEAR = """
local P, ns = ARGV[1], ARGV[2]
local C = false
for _, identity in ipairs(redis.call('SMEMBERS', P .. 'ci:' .. ns)) do
  redis.call('UNLINK', P .. 'c:' .. ns .. ':' .. identity)
end
redis.call('UNLINK', P .. 'ci:' .. ns)
if redis.call('HLEN', P .. 'd:' .. ns) == 0 then
  -- a later write of this namespace starts above its copies (a cluster: by the clock)
  if not C then redis.call('INCR', P .. 'vc') end
  redis.call('UNLINK', P .. 'm:' .. ns, P .. 'log:' .. ns, P .. 'tm:' .. ns, P .. 'rt:' .. ns)
end
return 1
"""

# ARGV: P, ns, since. Returns {ver, floor} when nothing changed or the log cannot
# bring ``since`` up to date, else {ver, floor, ids, vectors} (false: deleted).
_DELTA = """
local P, ns, since = ARGV[1], ARGV[2], tonumber(ARGV[3])
local m = redis.call('HMGET', P .. 'm:' .. ns, 'ver', 'floor')
local ver, floor = tonumber(m[1] or '0'), tonumber(m[2] or '0')
if since == ver or since < floor or since > ver then return {ver, floor} end
local ids = redis.call('ZRANGEBYSCORE', P .. 'log:' .. ns, '(' .. since, '+inf',
                       'LIMIT', 0, tonumber(ARGV[4]) + 1)
if #ids > tonumber(ARGV[4]) then return {ver, floor} end
if #ids == 0 then return {ver, floor, {}, {}} end
return {ver, floor, ids, redis.call('HMGET', P .. 'v:' .. ns, unpack(ids))}
"""


def _doc(chunk: Chunk) -> str:
    return json.dumps([chunk.text, chunk.metadata], separators=(",", ":"))


def _chunk(chunk_id: str, doc: str) -> Chunk:
    text, metadata = json.loads(doc)
    return Chunk(id=chunk_id, text=text, metadata=metadata)


def _time(chunk: Chunk) -> str:
    """The chunk's ``created_at`` for ``rt:<ns>`` (exact), "" when it is not a number."""
    at = recorded_at(chunk)
    return "" if at is None else repr(at)


def _terms(chunk: Chunk) -> tuple[str, str]:
    """``("<length> <term> ...", "<tf> ...")`` of the chunk's keyword tokens for the write script."""
    counts = Counter(keyword_tokens(chunk))
    length = sum(counts.values())
    return " ".join([str(length), *counts]), " ".join(map(str, counts.values()))


class RedisVectorIndex(MatrixIndex, VectorSpread):
    """Chunks, keyword postings and cached embeddings in Redis next to a
    :class:`RedisFactStore`'s facts, on its client (the
    :class:`~fastaiagent.facts.vectors.StoredVectorIndex` contract).

    Searches keep each namespace's vectors in this process (within the process's
    budget, :data:`fastaiagent.facts.index.matrix.CACHE_BYTES`, or ``cache_bytes``
    of this index's own; least recently searched dropped first) and catch up
    on other processes' writes with one round trip before ranking."""

    def __init__(
        self, store: RedisFactStore, *, cache_bytes: int | None = None, keys: str = "vec"
    ) -> None:
        if not isinstance(store, RedisFactStore):
            raise InvalidTypeError(
                f"RedisVectorIndex needs a RedisFactStore, got {type(store).__name__}"
            )
        self.store = store
        self.keys = keys  # the index's part of the key prefix: ``<store prefix>:<keys>:``
        self.prefix = f"{store.prefix}:{keys}:"
        self.cluster = store.cluster
        self.cache_bytes = positive_int("cache_bytes", cache_bytes, allow_none=True)
        # The namespace searched last is kept whatever its size: reading it again
        # would cost a whole HGETALL a search.
        super().__init__(cache_bytes, keep_newest=True)
        self._sizes = Dimension(None, f"another prefix than {self.prefix!r}")
        self._client: Any = store.client
        register = self._client.register_script

        def script(body: str) -> Any:
            return register(body.replace("local C = false", "local C = true", 1) if self.cluster else body)

        self._add, self._delete, self._clear = script(_ADD), script(_DELETE), script(_CLEAR)
        self._delta, self._record_times = script(_DELTA), script(_RECORD_TIMES)
        self._dimension: int | None = None
        self._checked = False

    def __repr__(self) -> str:
        return f"RedisVectorIndex(prefix={self.prefix!r})"

    def _k(self, kind: str, ns: str = "") -> str:
        return f"{self.prefix}{kind}{ns}"

    def _g(self, name: str) -> str:
        """A key of the whole prefix (``layout``, ``dim``, ``ns``, ``id``); in a cluster
        they share the prefix's own hash tag."""
        return self._k(name) if not self.cluster else f"{self._k(name)}:{{{self.prefix}}}"

    def _ns(self, namespace: str) -> str:
        """A namespace as it appears in keys: escaped; in a cluster also a hash tag
        (``{v:<ns>}``), so each namespace's keys share one slot."""
        if not self.cluster:
            return escape_part(namespace)
        return "{v:" + escape_part(namespace, braces=True) + "}"

    def _name(self, ns: str) -> str:
        """The inverse of :meth:`_ns`."""
        return unescape_part(ns[3:-1] if self.cluster else ns)

    def _call(self, operation: Callable[[], _T]) -> _T:
        with unavailable("the vector index"):
            self._check_layout()
            return operation()

    def _check_layout(self) -> None:
        if self._checked:
            return
        key = self._g("layout")
        found = self._client.get(key)
        if found is None:
            self._client.set(key, VECTORS_LAYOUT, nx=True)
        elif not found.isdigit() or int(found) > int(VECTORS_LAYOUT):
            raise SchemaVersionError(
                f"the Redis vectors under {self.prefix!r} have layout {found!r}, but this "
                f"fastaiagent knows layouts up to {VECTORS_LAYOUT}: they were written by a "
                "newer fastaiagent. Upgrade the package (pip install -U fastaiagent) in "
                "every process that opens them."
            )
        elif found != VECTORS_LAYOUT:
            self._checked = True  # the upgrade writes through this index's own add
            try:
                if found == "1":
                    self._record_all_times()
                self._retokenize()
            except BaseException:
                self._checked = False  # a later call upgrades again (each step repeats safely)
                raise
            self._client.set(key, VECTORS_LAYOUT)
        self._checked = True
        self._open_analyzer()

    def _open_analyzer(self) -> None:
        """The first use: the recorded analyzer version checked (see ``reindex``)."""
        key = self._g("analyzer")
        found = self._client.get(key)
        if analyzer_opened(self, int(found) if found else None) == "record":
            try:
                self._client.set(key, current_version(), nx=True)
            except Exception as exc:  # a read-only replica still reads; the next open records it
                logger.debug("analyzer version of %r not recorded: %s", self, exc)

    def write_analyzer(self, version: int) -> None:
        self._call(lambda: self._client.set(self._g("analyzer"), version))

    def _retokenize(self) -> int:
        """Layouts 2-3 -> 4: each chunk whose postings today's tokenizer would make
        otherwise (``tm:<ns>`` holds its terms) is written again with its own vector;
        others are not touched. Returns how many."""
        done = 0
        for ns in sorted(self._client.smembers(self._g("ns"))):
            cursor = 0
            while True:
                cursor, part = self._client.hscan(self._k("d:", ns), cursor, count=SCAN_STEP)
                chunks = [_chunk(i, doc) for i, doc in part.items()]
                held = self._client.hmget(self._k("tm:", ns), [c.id for c in chunks]) if chunks else []
                chunks = [c for c, terms in zip(chunks, held, strict=True) if terms != _terms(c)[0]]
                if chunks:
                    raw = self._client.execute_command(
                        "HMGET", self._k("v:", ns), *[c.id for c in chunks], **_NEVER_DECODE
                    )
                    again = [
                        Chunk(c.id, c.text, np.frombuffer(blob, dtype=np.float32).tolist(), c.metadata)
                        for c, blob in zip(chunks, raw, strict=True) if blob
                    ]  # fmt: skip
                    self.add(again)
                    done += len(again)
                if not int(cursor):
                    break
        return done

    def _record_all_times(self) -> None:
        """Layout 1 -> 2: enter every chunk's time in ``rt:<ns>``, in atomic batches
        (a write meanwhile keeps its own entry; running twice changes nothing)."""
        for ns in sorted(self._client.smembers(self._g("ns"))):
            ids = self._client.hkeys(self._k("d:", ns))
            for start in range(0, len(ids), _DROP_BATCH):
                batch = ids[start : start + _DROP_BATCH]
                self._run(self._record_times, [self.prefix, ns, *batch], ns)

    @property
    def dimension(self) -> int | None:
        """The vectors' length, fixed by the first ``add`` of any process; None before."""
        if self._dimension is None:
            found = self._call(lambda: self._client.get(self._g("dim")))
            self._dimension = int(found) if found else None
        return self._dimension

    # -- indexes of other sizes beside this one (StoreCapabilities.vector_store) --

    def beside(self, size: int) -> RedisVectorIndex:
        """The index of ``size``-dimensional vectors under ``<store prefix>:<keys><size>:``."""
        return RedisVectorIndex(self.store, cache_bytes=self.cache_bytes, keys=f"{self.keys}{size}")

    def claim_dimension(self, size: int) -> int:
        """Fix ``size`` as the dimension unless the index already has one (in any
        process); returns the dimension it has now."""
        key = self._g("dim")
        found = self._call(lambda: self._client.set(key, size, nx=True) or self._client.get(key))
        self._dimension = size if found is True else int(found)
        return self._dimension

    def record_dimension(self, size: int) -> None:
        """Note that an index of ``size`` lives beside this one (a set of the prefix)."""
        self._call(lambda: self._client.sadd(self._g("dims"), size))

    def recorded_dimensions(self) -> list[int]:
        """The sizes :meth:`record_dimension` noted, by any process."""
        return sorted(int(size) for size in self._call(lambda: self._client.smembers(self._g("dims"))))

    # -- writes ------------------------------------------------------------

    def add(self, chunks: Sequence[Chunk]) -> None:
        """Insert or replace ``chunks`` (and their postings) in one script call."""
        batch = checked_batch(chunks, self.dimension)
        if batch is None:
            return
        dimension = batch.dimension
        rows: list[list[Any]] = []
        for chunk, key, vector in zip(batch.chunks, batch.keys, batch.vectors, strict=True):
            terms, tfs = _terms(chunk)
            rows.append([chunk.id, self._ns(key), vector_bytes(vector), _doc(chunk), terms, tfs, _time(chunk)])
        if self.cluster:
            stored = self._call(lambda: self._spread_add(rows, dimension))
        else:
            args = [value for row in rows for value in row]
            stored = self._call(lambda: self._run(self._add, [self.prefix, dimension, *args]))
        if stored is not None:
            self._dimension = int(stored)
            raise self._sizes.refused(dimension, self._dimension)
        self._dimension = dimension

    def delete_ids(self, ids: list[str]) -> int:
        """Delete chunks (vector, text, postings) by id; returns how many were there."""
        if self.cluster:
            return self._call(lambda: self._spread_delete(ids))
        return int(self._call(lambda: self._run(self._delete, [self.prefix, "", *ids])))

    def delete_namespace_rows(self, namespace: str) -> int:
        """In atomic steps of ``_DROP_BATCH`` chunks."""
        ns = self._ns(namespace)

        def run() -> int:
            total, docs, cursor = 0, self._k("d:", ns), 0
            while True:  # HSCAN, not HKEYS: no command reads the whole namespace
                cursor, found = self._client.hscan(docs, cursor, count=_DROP_BATCH)
                if found:  # a page may be empty before the scan ends
                    total += int(self._run(self._delete, [self.prefix, "=" + ns, *found], ns))
                    self._spread_unmap(ns, found)
                if not cursor and not self._client.hlen(docs):
                    break
            self._run(self._clear, [self.prefix, ns], ns)
            self._spread_unlist(ns)
            return total

        return self._call(run)

    # -- embedding cache ---------------------------------------------------

    def _cache_key(self, identity: str, namespace: str) -> str:
        return self._k("c:", f"{self._ns(namespace)}:{escape_part(identity)}")

    def read_cache(self, identity: str, namespace: str, keys: list[str]) -> list[tuple[str, bytes]]:
        key = self._cache_key(identity, namespace)
        found = self._call(
            lambda: self._client.execute_command("HMGET", key, *keys, **_NEVER_DECODE)
        )
        return [(k, raw) for k, raw in zip(keys, found, strict=True) if raw is not None]

    def delete_cache(self, namespace: str, keys: list[str]) -> None:
        """HDEL from the hash of each identity ``ci:<ns>`` lists."""
        ns = self._ns(namespace)

        def run() -> None:
            identities = self._client.smembers(self._k("ci:", ns))
            if identities:
                pipe = self._client.pipeline(transaction=False)
                for identity in identities:
                    pipe.hdel(self._k("c:", f"{ns}:{identity}"), *keys)
                pipe.execute()

        self._call(run)

    def write_cache(self, identity: str, namespace: str, blobs: Mapping[str, bytes]) -> None:
        """One MULTI."""
        key = self._cache_key(identity, namespace)

        def run() -> None:
            pipe = self._client.pipeline(transaction=True)
            pipe.hset(key, mapping=dict(blobs))
            pipe.sadd(self._k("ci:", self._ns(namespace)), escape_part(identity))
            pipe.execute()

        self._call(run)

    # -- reads -------------------------------------------------------------

    def _names(self, keys: list[str] | None) -> list[str]:
        """Escaped namespaces a read covers (``None``: every one that holds chunks)."""
        if keys is not None:
            return [self._ns(k) for k in keys]
        return sorted(self._client.smembers(self._g("ns")))

    def _run(self, script: Any, args: list[Any], ns: str = "") -> Any:
        """A write script (in a cluster: in namespace ``ns``'s slot, or the prefix's,
        acknowledged by replicas)."""
        return self.store.run_script(script, [], args, route=self._k("m:", ns) if ns else self._g("id"))

    def _eval_bytes(self, script: Any, args: list[Any]) -> Any:
        """EVALSHA with the reply left as bytes (redis-py's Script always decodes); in
        a cluster with a key of the namespace's slot (``args[1]``), which routes it."""
        keys = [1, self._k("m:", args[1])] if self.cluster else [0]
        try:
            return self._client.execute_command("EVALSHA", script.sha, *keys, *args, **_NEVER_DECODE)
        except _NoScript:  # a restarted or flushed server: load it again
            self._client.script_load(script.script)
            return self._client.execute_command("EVALSHA", script.sha, *keys, *args, **_NEVER_DECODE)

    def report_change(self, dimension: int, namespace: str, held: NamespaceMatrix | None) -> Change:
        """One script call returns the chunks changed since ``held``'s version (from
        ``log``); a copy the log cannot bring up to date (or none) reads the whole
        namespace (one that Redis does not hold reads as empty)."""
        ns = self._ns(namespace)
        if held is not None:
            reply = self._eval_bytes(self._delta, [self.prefix, ns, held.version, DELTA_LIMIT])
            version = int(reply[0])
            if len(reply) == 4:
                return _delta(version, held.version, reply[2], reply[3], dimension)
            if version == held.version:
                return Change(version, since=version)
        # Version first: a write landing in between is replayed by the next delta.
        pipe = self._client.pipeline(transaction=False)
        pipe.hget(self._k("m:", ns), "ver")
        pipe.hlen(self._k("v:", ns))
        version, count = pipe.execute()
        ids, matrix = self._scan_vectors(self._k("v:", ns), int(count), dimension)
        return Change(int(version or 0), keys=ids, vectors=unit_rows(matrix, in_place=True))

    def _scan_vectors(self, key: str, count: int, dimension: int) -> tuple[list[str], Any]:
        """A namespace's ids and vectors, :data:`SCAN_STEP` at a time (HSCAN: a 100k
        namespace read whole by one HGETALL blocked Redis for ~380 ms), written
        straight into one matrix of the ``count`` rows HLEN gave (one copy of the
        bytes, not a join and a copy). A chunk changed meanwhile is in the log after
        the version read first; one HSCAN may return twice during a rehash."""
        matrix = np.empty((count, dimension), dtype=np.float32)
        ids: list[str] = []
        cursor = 0
        while True:
            cursor, part = self._client.execute_command(
                "HSCAN", key, cursor, "COUNT", SCAN_STEP, **_NEVER_DECODE
            )  # redis-py gives (int cursor, dict)
            filled = len(ids)
            if filled + len(part) > len(matrix):  # added since HLEN
                matrix = np.concatenate([matrix[:filled], np.empty((len(part), dimension), np.float32)])
            rows = np.frombuffer(b"".join(part.values()), dtype=np.float32)
            matrix[filled : filled + len(part)] = rows.reshape(len(part), dimension)
            ids += [raw_id.decode("utf-8") for raw_id in part]
            if not int(cursor):
                return _first_of_each(ids, matrix[: len(ids)])

    def rank_namespaces(self, query: Any, top_k: int, keys: list[str] | None) -> list[SearchHit]:
        """Exact search in this process's copies, caught up in one round trip each."""
        dimension = len(query)

        def run() -> list[SearchHit]:
            found = []
            for ns in self._names(keys):
                view = self.current(self._name(ns), dimension)
                if view is not None:
                    found += [(s, (ns, i)) for s, i in view.top(query, top_k)]
            return ranked_hits(found, top_k, self._hit_chunks)

        return self._call(run)

    def rank_spans(self, query: Any, top_k: int, keys: list[str], spans: Spans) -> list[SearchHit]:
        """The ids of the spans from ``rt:<ns>`` (one round trip), ranked in this
        process's copy of the namespace."""
        bounds = [(float(a), float(b)) for a, b in spans]

        def run() -> list[SearchHit]:
            found = []
            for ns in self._names(keys):
                pipe, key = self._client.pipeline(transaction=False), self._k("rt:", ns)
                for start, end in bounds:
                    pipe.zrangebyscore(key, repr(start), f"({end!r}", 0, RECORDED_LIMIT + 1)
                wanted = list(dict.fromkeys(i for ids in pipe.execute() for i in ids))
                if not wanted or len(wanted) > RECORDED_LIMIT:
                    continue
                view = self.current(self._name(ns), len(query))
                if view is not None:
                    found += [(s, (ns, i)) for s, i in view.among(wanted, query)]
            return ranked_hits(found, top_k, self._hit_chunks)

        return self._call(run)

    def _hit_chunks(self, wanted: list[tuple[str, str]]) -> dict[tuple[str, str], Chunk]:
        """The chunks of these (escaped namespace, id) pairs, in one round trip."""
        docs = self._docs(wanted)
        return {pair: _chunk(pair[1], doc) for pair, doc in zip(wanted, docs, strict=True) if doc}

    def _docs(self, wanted: list[tuple[str, str]]) -> list[str | None]:
        """The stored JSON of these (escaped namespace, id) pairs, in order."""
        if not wanted:
            return []
        pipe = self._client.pipeline(transaction=False)
        for ns, chunk_id in wanted:
            pipe.hget(self._k("d:", ns), chunk_id)
        return list(pipe.execute())

    def score_keywords(self, terms: list[str], top_k: int, namespace: str) -> list[tuple[str, float]]:
        """BM25 of about :func:`budget` documents, picked as the SQLite and Postgres
        indexes pick them: every one holding the rarest terms (their postings read
        whole), then the newest holding the others, read along the times of
        ``rt:<ns>`` (a common word's postings read whole took 40-70 ms at 100k
        messages). Where some chunk has no time recorded, the common terms'
        postings are read whole, as before."""
        ns = self._ns(namespace)

        def stats() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            pipe.hlen(self._k("d:", ns))
            pipe.hget(self._k("m:", ns), "tot")
            pipe.zcard(self._k("rt:", ns))
            for term in terms:
                pipe.hlen(self._k("p:", f"{ns}:{term}"))
            return list(pipe.execute())

        n_docs, total, timed, *counts = self._call(stats)
        docs, limit = int(n_docs), budget(top_k)
        frequency = dict(zip(terms, (int(n) for n in counts), strict=True))
        rare, common = by_rarity(frequency, limit)
        if int(timed) < docs:  # not every chunk has a time: the common terms whole
            rare, common = rare + common, []
        found = self._call(lambda: self._keyword_rows(ns, rare, common, frequency, limit, docs))
        return bm25_top(frequency, found, docs, int(total or 0), top_k)

    def _keyword_rows(
        self, ns: str, rare: list[str], common: list[str], frequency: dict[str, int], limit: int, docs: int
    ) -> list[tuple[str, int, dict[str, int]]]:
        """Rows for ``bm25_top``: the documents holding a ``rare`` term, then the newest
        holding a ``common`` one, up to ``limit``, with their counts of every term."""
        pipe = self._client.pipeline(transaction=False)
        for term in rare:
            pipe.hgetall(self._k("p:", f"{ns}:{term}"))
        rows: dict[str, tuple[int, dict[str, int]]] = {}
        for term, postings in zip(rare, pipe.execute() if rare else [], strict=True):
            for chunk_id, posting in postings.items():
                tf, length = posting.split(" ")
                rows.setdefault(chunk_id, (int(length), {}))[1][term] = int(tf)
        if not common:
            return [(i, length, counts) for i, (length, counts) in rows.items()]
        held, window = sum(frequency[t] for t in common), 0
        wanted = limit - len(rows)
        while True:  # the newest `window` chunks, and the common terms' counts of them
            window = newest_window(wanted, docs, held) if not window else min(docs, window * 4)
            newest = [i for i in self._client.zrevrange(self._k("rt:", ns), 0, window - 1) if i not in rows]
            ids = [*rows, *newest]
            pipe = self._client.pipeline(transaction=False)
            for term in common:
                pipe.hmget(self._k("p:", f"{ns}:{term}"), ids)
            counted: dict[str, tuple[int, dict[str, int]]] = {}
            for term, postings in zip(common, pipe.execute(), strict=True):
                for chunk_id, posting in zip(ids, postings, strict=True):
                    if posting is not None:
                        tf, length = posting.split(" ")
                        counted.setdefault(chunk_id, (int(length), {}))[1][term] = int(tf)
            holding = [i for i in newest if i in counted]
            if len(holding) >= wanted or window >= docs:
                break
        out = [(i, length, {**counts, **counted.get(i, (0, {}))[1]}) for i, (length, counts) in rows.items()]
        return out + [(i, counted[i][0], counted[i][1]) for i in holding[:wanted]]

    def read_ids(self, namespace: str) -> set[str]:
        key = self._k("d:", self._ns(namespace))
        return set(self._call(lambda: self._client.hkeys(key)))

    def read_chunks(self, ids: list[str]) -> dict[str, Chunk]:
        def run() -> dict[str, Chunk]:
            where = self._client.hmget(self._g("id"), ids)
            pairs = [(ns, i) for ns, i in zip(where, ids, strict=True) if ns is not None]
            docs = self._docs(pairs)
            return {i: _chunk(i, doc) for (_, i), doc in zip(pairs, docs, strict=True) if doc}

        return self._call(run)

    def read_vector_page(self, namespace: str, after: Any, limit: int) -> tuple[list[Chunk], Any]:
        """Pages in id order: the first call collects the ids with HSCAN (bounded
        steps), the cursor is (ids, position); each page is two HMGETs."""
        ns = self._ns(namespace)

        def run() -> tuple[list[Chunk], Any]:
            ids, start = after or (sorted(self._scan_ids(self._k("d:", ns))), 0)
            wanted = ids[start : start + limit]
            if not wanted:
                return [], None
            docs = self._client.hmget(self._k("d:", ns), wanted)
            blobs = self._client.execute_command("HMGET", self._k("v:", ns), *wanted, **_NEVER_DECODE)
            chunks = [
                Chunk(i, text, bytes_vector(blob), metadata)
                for i, doc, blob in zip(wanted, docs, blobs, strict=True)
                if doc is not None and blob is not None
                for text, metadata in [json.loads(doc)]
            ]
            end = start + len(wanted)
            return chunks, ((ids, end) if end < len(ids) else None)

        return self._call(run)

    def _scan_ids(self, key: str) -> list[str]:
        found: list[str] = []
        cursor = 0
        while True:
            cursor, part = self._client.hscan(key, cursor, count=SCAN_STEP)  # NOVALUES: Redis 7.4+
            found += part
            if not int(cursor):
                return list(set(found))  # HSCAN may return an id twice

    def read_newest(self, namespace: str, limit: int, offset: int) -> list[Chunk]:
        """The page from ``rt:<ns>`` newest first; past its end, the chunks without a
        numeric time, in id order (read only then: recall always records a time)."""
        ns = self._ns(namespace)

        def run() -> list[Chunk]:
            pipe = self._client.pipeline(transaction=False)
            pipe.zrevrange(self._k("rt:", ns), offset, offset + limit - 1)
            pipe.zcard(self._k("rt:", ns))
            ids, timed = pipe.execute()
            if len(ids) < limit:
                ids += self._untimed(ns)[max(0, offset - int(timed)) :][: limit - len(ids)]
            docs = self._client.hmget(self._k("d:", ns), ids) if ids else []
            return [_chunk(i, doc) for i, doc in zip(ids, docs, strict=True) if doc is not None]

        return self._call(run)

    def _untimed(self, ns: str) -> list[str]:
        """The ids of ``ns`` missing from ``rt:<ns>``, sorted."""
        timed = set(self._client.zrange(self._k("rt:", ns), 0, -1))
        return sorted(i for i in self._scan_ids(self._k("d:", ns)) if i not in timed)

    def read_namespace_counts(self) -> list[tuple[str, int]]:
        """HLEN of each listed namespace, in one pipeline."""

        def run() -> list[tuple[str, int]]:
            names = sorted(self._client.smembers(self._g("ns")))
            pipe = self._client.pipeline(transaction=False)
            for ns in names:
                pipe.hlen(self._k("d:", ns))
            return [(self._name(ns), int(n)) for ns, n in zip(names, pipe.execute(), strict=True)]

        return self._call(run)

    def read_namespace_names(self) -> list[str]:
        return [self._name(ns) for ns in self._call(lambda: self._client.smembers(self._g("ns")))]

    def read_namespaces(self, keys: list[str] | None) -> list[Chunk]:
        def run() -> list[Chunk]:
            pipe = self._client.pipeline(transaction=False)
            for ns in self._names(keys):
                pipe.hgetall(self._k("d:", ns))
            return [_chunk(i, doc) for docs in pipe.execute() for i, doc in docs.items()]

        return self._call(run)

    def count_rows(self, namespace: str | None) -> int:
        key = self._g("id") if namespace is None else self._k("d:", self._ns(namespace))
        return int(self._call(lambda: self._client.hlen(key)))


def _first_of_each(ids: list[str], matrix: Any) -> tuple[list[str], Any]:
    """``ids`` and their rows with each id once (a rehash can repeat one)."""
    if len(set(ids)) == len(ids):
        return ids, matrix
    first = {chunk_id: row for row, chunk_id in reversed(list(enumerate(ids)))}
    rows = sorted(first.values())
    return [ids[row] for row in rows], matrix[rows]


def _delta(version: int, since: int, ids: list[bytes], raws: list[bytes | None], dimension: int) -> Change:
    """The :class:`Change` of the delta script's reply: ids with their vector bytes,
    or none (removed). Redis keeps vectors as given: they are normalised here."""
    written = [(raw_id.decode("utf-8"), raw) for raw_id, raw in zip(ids, raws, strict=True) if raw]
    removed = [raw_id.decode("utf-8") for raw_id, raw in zip(ids, raws, strict=True) if not raw]
    matrix = np.frombuffer(b"".join(raw for _, raw in written), dtype=np.float32)
    vectors = unit_rows(matrix.reshape(len(written), dimension))
    return Change(version, since=since, keys=[i for i, _ in written], vectors=vectors, removed=removed)


__all__ = ["DELTA_LIMIT", "VECTORS_LAYOUT", "RedisVectorIndex"]
