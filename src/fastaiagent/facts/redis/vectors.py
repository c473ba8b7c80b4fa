"""Durable vectors, keyword postings and cached embeddings in plain Redis (no modules).

Key layout under ``<prefix>:vec:`` (``<ns>`` is the escaped namespace, ``""``
for untagged chunks):

- ``layout`` - this layout's version (``VECTORS_LAYOUT``); ``dim`` - the dimension
- ``ns`` - namespaces holding chunks (set); ``id`` - chunk id -> ``<ns>`` (hash)
- ``v:<ns>`` - chunk id -> float32 vector bytes (hash)
- ``d:<ns>`` - chunk id -> JSON ``[text, metadata]`` (hash)
- ``tm:<ns>`` - chunk id -> ``"<length> <term> <term> ..."`` (what to unindex)
- ``p:<ns>:<term>`` - postings: chunk id -> ``"<tf> <length>"`` (hash)
- ``m:<ns>`` - ``ver`` (bumped by every change), ``floor``, ``tot`` (total length)
- ``log:<ns>`` - chunk id -> ``ver`` of its last change (sorted set)
- ``rt:<ns>`` - chunk id -> its numeric ``metadata.created_at`` (sorted set, layout 2:
  the chunks of a span of time for ``search_recorded``)
- ``c:<ns>:<identity>`` - text key -> float32 bytes; ``ci:<ns>`` - those identities

Every write is one Lua script, so a chunk, its postings and the version move
together. A search keeps each namespace's normalised matrix in the process
and brings it up to date with one script call that returns only the chunks
changed since (``log``); reading a whole namespace from Redis on every search
would cost ~25 ms at 10k vectors of 384 dims. ``floor`` marks the oldest
version the log still covers: older process caches reload the namespace.
The keyword side reads only the query terms' postings and scores them BM25
(as :class:`~fastaiagent.kb.bm25.BM25Index`, the same tokenizer).
"""

from __future__ import annotations

import heapq
import json
import math
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from fastaiagent._optional import require
from fastaiagent._validate import positive_int
from fastaiagent._validate import text as check_text
from fastaiagent.errors import InvalidTypeError, SchemaVersionError
from fastaiagent.facts.redis.client import unavailable
from fastaiagent.facts.redis.layout import escape_part
from fastaiagent.facts.redis.store import RedisFactStore
from fastaiagent.facts.vectors import RECORDED_LIMIT, RecordedSearch, keyword_text, recorded_at
from fastaiagent.kb.bm25 import tokenize
from fastaiagent.kb.protocols import (
    Chunk,
    DimensionMismatchError,
    NamespacedSearch,
    SearchHit,
    check_chunk,
    check_top_k,
    check_vector,
    id_list,
    namespace_key,
    wanted_keys,
)

np = require("numpy", "redis")
_client_mod = require("redis.client", "redis")
_NoScript = require("redis.exceptions", "redis").NoScriptError
_NEVER_DECODE = {_client_mod.NEVER_DECODE: True}  # replies read as bytes (vectors)

VECTORS_LAYOUT = "2"
DELTA_LIMIT = 2000  # changed chunks a cache catches up on; more reloads the namespace
_DROP_BATCH = 500  # chunks one delete_namespace step removes
_K1, _B = 1.2, 0.75  # BM25 parameters, as BM25Index
_T = TypeVar("_T")

# Shared by the write scripts: drop one chunk (vector, text, postings) and log it.
_COMMON = """
local P = ARGV[1]
local function compact(ns, ver)
  -- a log far longer than the namespace is mostly tombstones: start afresh
  if redis.call('ZCARD', P .. 'log:' .. ns) > 2 * redis.call('HLEN', P .. 'd:' .. ns) + 1000 then
    redis.call('DEL', P .. 'log:' .. ns)
    redis.call('HSET', P .. 'm:' .. ns, 'floor', ver)
  end
end
local function changed(ns, id)
  local ver = redis.call('HINCRBY', P .. 'm:' .. ns, 'ver', 1)
  redis.call('ZADD', P .. 'log:' .. ns, ver, id)
  return ver
end
local function drop(id, want)
  local ns = redis.call('HGET', P .. 'id', id)
  if not ns or (want and ns ~= want) then return 0 end
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
  redis.call('HDEL', P .. 'id', id)
  redis.call('ZREM', P .. 'rt:' .. ns, id)
  compact(ns, changed(ns, id))
  if redis.call('HLEN', P .. 'd:' .. ns) == 0 then redis.call('SREM', P .. 'ns', ns) end
  return 1
end
"""

# ARGV: P, dim, then per chunk: id, ns, vector, doc, "<length> <terms...>", "<tfs...>",
# created_at ("" when not a number). Returns nil, or the stored dimension when it
# differs from ``dim``.
_ADD = (
    _COMMON
    + """
local dim = redis.call('GET', P .. 'dim')
if dim and dim ~= ARGV[2] then return dim end
if not dim then redis.call('SET', P .. 'dim', ARGV[2]) end
for i = 3, #ARGV, 7 do
  local id, ns, vec, doc, tm, tfs = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3], ARGV[i+4], ARGV[i+5]
  drop(id, nil)
  if ARGV[i+6] ~= '' then redis.call('ZADD', P .. 'rt:' .. ns, ARGV[i+6], id) end
  redis.call('HSET', P .. 'v:' .. ns, id, vec)
  redis.call('HSET', P .. 'd:' .. ns, id, doc)
  redis.call('HSET', P .. 'id', id, ns)
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
  redis.call('SADD', P .. 'ns', ns)
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

# ARGV: P, ns. Drops the namespace's cached embeddings, and its log once it is empty.
_CLEAR = """
local P, ns = ARGV[1], ARGV[2]
for _, identity in ipairs(redis.call('SMEMBERS', P .. 'ci:' .. ns)) do
  redis.call('DEL', P .. 'c:' .. ns .. ':' .. identity)
end
redis.call('DEL', P .. 'ci:' .. ns)
if redis.call('HLEN', P .. 'd:' .. ns) == 0 then
  local ver = redis.call('HINCRBY', P .. 'm:' .. ns, 'ver', 1)
  redis.call('DEL', P .. 'log:' .. ns, P .. 'tm:' .. ns)
  redis.call('HSET', P .. 'm:' .. ns, 'floor', ver, 'tot', 0)
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


class _Matrix:
    """One namespace's normalised vectors in this process, with the version read."""

    def __init__(self, dimension: int, version: int) -> None:
        self.version = version
        self.ids: list[str] = []
        self.rows: dict[str, int] = {}
        self.data = np.zeros((16, dimension), dtype=np.float32)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def put(self, chunk_id: str, raw: bytes | None) -> None:
        """Upsert (``raw`` vector bytes) or remove (None) one chunk."""
        row = self.rows.get(chunk_id)
        if raw is None:
            if row is not None:  # move the last row into the hole
                last = len(self.ids) - 1
                moved = self.ids[last]
                self.data[row] = self.data[last]
                self.ids[row], self.rows[moved] = moved, row
                self.ids.pop()
                del self.rows[chunk_id]
            return
        vector = np.frombuffer(raw, dtype=np.float32)
        norm = float(np.linalg.norm(vector))
        if row is None:
            row = len(self.ids)
            if row == len(self.data):
                # grow by a quarter: doubling a 100k-row matrix would hold 300 MB
                extra = np.zeros((max(16, row // 4), self.data.shape[1]), dtype=np.float32)
                self.data = np.concatenate([self.data, extra])
            self.ids.append(chunk_id)
            self.rows[chunk_id] = row
        self.data[row] = vector / norm if norm else vector

    def load(self, pairs: Mapping[bytes, bytes]) -> None:
        """Fill from a whole ``v:<ns>`` hash (empty cache)."""
        ids = [key.decode("utf-8") for key in pairs]
        if ids:
            matrix = np.frombuffer(b"".join(pairs.values()), dtype=np.float32)
            matrix = matrix.reshape(len(ids), -1).copy()
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            matrix /= np.where(norms == 0, 1.0, norms)
            self.data = matrix
        self.ids = ids
        self.rows = {chunk_id: n for n, chunk_id in enumerate(ids)}

    def top(self, query: Any, top_k: int) -> list[tuple[str, float]]:
        """The ``top_k`` (id, cosine) of this namespace, best first."""
        count = len(self.ids)
        if count == 0:
            return []
        # einsum, not @: a threaded BLAS matvec stalls for ms whenever another
        # process holds a core (measured 9 ms vs 0.4 ms p50 at 10k on 2 busy cores).
        scores = np.einsum("ij,j->i", self.data[:count], query)
        best = np.argpartition(-scores, top_k - 1)[:top_k] if top_k < count else np.arange(count)
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(self.ids[n], float(scores[n])) for n in best]

    def among(self, ids: Sequence[str], query: Any) -> list[tuple[str, float]]:
        """(id, cosine) of the chunks of ``ids`` this matrix holds."""
        rows = [row for i in ids if (row := self.rows.get(i)) is not None]
        if not rows:
            return []
        scores = np.einsum("ij,j->i", self.data[rows], query)
        return [(self.ids[row], float(score)) for row, score in zip(rows, scores, strict=True)]


def _doc(chunk: Chunk) -> str:
    return json.dumps([chunk.text, chunk.metadata], separators=(",", ":"))


def _chunk(chunk_id: str, doc: str) -> Chunk:
    text, metadata = json.loads(doc)
    return Chunk(id=chunk_id, text=text, metadata=metadata)


def _time(chunk: Chunk) -> str:
    """The chunk's ``created_at`` for ``rt:<ns>`` (exact), "" when it is not a number."""
    at = recorded_at(chunk)
    return "" if at is None else repr(at)


def _terms(text: str) -> tuple[str, str]:
    """``("<length> <term> ...", "<tf> ...")`` for the write script."""
    counts = Counter(tokenize(text))
    length = sum(counts.values())
    return " ".join([str(length), *counts]), " ".join(map(str, counts.values()))


def _unit_query(vector: Sequence[float], dimension: int) -> Any:
    """The checked query vector, L2-normalised (float32)."""
    query = np.asarray(check_vector(vector, dimension, "query vector"), dtype=np.float32)
    norm = float(np.linalg.norm(query))
    return query / norm if norm else query


def _vector_bytes(values: Sequence[float]) -> bytes:
    return bytes(np.asarray(values, dtype=np.float32).tobytes())


class RedisVectorIndex(NamespacedSearch, RecordedSearch):
    """Chunks, keyword postings and cached embeddings in Redis next to a
    :class:`RedisFactStore`'s facts, on its client (the
    :class:`~fastaiagent.facts.vectors.StoredVectorIndex` contract).

    Searches keep each namespace's vectors in this process (``cache_bytes`` at
    most, least recently searched dropped first) and catch up on other
    processes' writes with one round trip before ranking."""

    def __init__(self, store: RedisFactStore, *, cache_bytes: int = 256 * 2**20) -> None:
        if not isinstance(store, RedisFactStore):
            raise InvalidTypeError(
                f"RedisVectorIndex needs a RedisFactStore, got {type(store).__name__}"
            )
        self.store = store
        self.prefix = f"{store.prefix}:vec:"
        positive_int("cache_bytes", cache_bytes)
        self.cache_bytes = cache_bytes
        self._client: Any = store.client
        script = self._client.register_script
        self._add, self._delete, self._clear = script(_ADD), script(_DELETE), script(_CLEAR)
        self._delta, self._record_times = script(_DELTA), script(_RECORD_TIMES)
        self._dimension: int | None = None
        self._checked = False
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, _Matrix] = OrderedDict()

    def __repr__(self) -> str:
        return f"RedisVectorIndex(prefix={self.prefix!r})"

    def _k(self, kind: str, ns: str = "") -> str:
        return f"{self.prefix}{kind}{ns}"

    def _call(self, operation: Callable[[], _T]) -> _T:
        with unavailable("the vector index"):
            self._check_layout()
            return operation()

    def _check_layout(self) -> None:
        if self._checked:
            return
        key = self._k("layout")
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
        elif found == "1":
            self._record_all_times()
            self._client.set(key, VECTORS_LAYOUT)
        self._checked = True

    def _record_all_times(self) -> None:
        """Layout 1 -> 2: enter every chunk's time in ``rt:<ns>``, in atomic batches
        (a write meanwhile keeps its own entry; running twice changes nothing)."""
        for ns in sorted(self._client.smembers(self._k("ns"))):
            ids = self._client.hkeys(self._k("d:", ns))
            for start in range(0, len(ids), _DROP_BATCH):
                batch = ids[start : start + _DROP_BATCH]
                self._record_times(args=[self.prefix, ns, *batch])

    @property
    def dimension(self) -> int | None:
        """The vectors' length, fixed by the first ``add`` of any process; None before."""
        if self._dimension is None:
            found = self._call(lambda: self._client.get(self._k("dim")))
            self._dimension = int(found) if found else None
        return self._dimension

    # -- writes ------------------------------------------------------------

    def add(self, chunks: Sequence[Chunk]) -> None:
        """Insert or replace ``chunks`` (and their postings) in one script call."""
        dimension = self.dimension
        args: list[Any] = []
        for chunk in chunks:
            vector = check_chunk(chunk, dimension)
            dimension = dimension or len(vector)
            terms, tfs = _terms(keyword_text(chunk))
            ns = escape_part(namespace_key(chunk.metadata))
            args += [chunk.id, ns, _vector_bytes(vector), _doc(chunk), terms, tfs, _time(chunk)]
        if not args:
            return
        stored = self._call(lambda: self._add(args=[self.prefix, dimension, *args]))
        if stored is not None:
            self._dimension = int(stored)
            raise DimensionMismatchError(
                f"the chunks have dimension {dimension} but the index under {self.prefix!r} "
                f"has dimension {stored}; use an embedder of the same size or another prefix"
            )
        self._dimension = dimension

    def delete(self, ids: Sequence[str]) -> int:
        """Delete chunks (vector, text, postings) by id; returns how many were there."""
        wanted = id_list(ids, "delete")
        if not wanted:
            return 0
        return int(self._call(lambda: self._delete(args=[self.prefix, "", *wanted])))

    def delete_namespace(self, namespace: str) -> int:
        """Delete every chunk of ``namespace`` with its postings and cached embeddings,
        in atomic steps of ``_DROP_BATCH`` chunks; returns how many there were."""
        wanted_keys(namespace, False)  # validates
        ns = escape_part(namespace)

        def run() -> int:
            total = 0
            while ids := self._client.hkeys(self._k("d:", ns)):
                for start in range(0, len(ids), _DROP_BATCH):
                    batch = ids[start : start + _DROP_BATCH]
                    total += int(self._delete(args=[self.prefix, "=" + ns, *batch]))
            self._clear(args=[self.prefix, ns])
            return total

        count = self._call(run)
        with self._lock:
            self._cache.pop(ns, None)
        return count

    # -- embedding cache ---------------------------------------------------

    def _cache_key(self, identity: str, namespace: str) -> str:
        wanted_keys(namespace, False)  # validates
        check_text("identity", identity)
        return self._k("c:", f"{escape_part(namespace)}:{escape_part(identity)}")

    def cached_embeddings(
        self, identity: str, namespace: str, keys: Sequence[str]
    ) -> dict[str, list[float]]:
        """Cached vectors of ``identity`` for these text keys in ``namespace``."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        key = self._cache_key(identity, namespace)
        found = self._call(
            lambda: self._client.execute_command("HMGET", key, *wanted, **_NEVER_DECODE)
        )
        return {
            k: np.frombuffer(raw, dtype=np.float32).tolist()
            for k, raw in zip(wanted, found, strict=True)
            if raw is not None
        }

    def cache_embeddings(
        self, identity: str, namespace: str, vectors: Mapping[str, Sequence[float]]
    ) -> None:
        """Remember vectors of ``identity`` by text key in ``namespace`` (one MULTI)."""
        key = self._cache_key(identity, namespace)
        mapping = {
            k: _vector_bytes(check_vector(v, None, "a cached embedding"))
            for k, v in vectors.items()
        }
        if not mapping:
            return

        def run() -> None:
            pipe = self._client.pipeline(transaction=True)
            pipe.hset(key, mapping=mapping)
            pipe.sadd(self._k("ci:", escape_part(namespace)), escape_part(identity))
            pipe.execute()

        self._call(run)

    # -- reads -------------------------------------------------------------

    def _names(self, keys: list[str] | None) -> list[str]:
        """Escaped namespaces a read covers (``None``: every one that holds chunks)."""
        if keys is not None:
            return [escape_part(k) for k in keys]
        return sorted(self._client.smembers(self._k("ns")))

    def _eval_bytes(self, script: Any, args: list[Any]) -> Any:
        """EVALSHA with the reply left as bytes (redis-py's Script always decodes)."""
        try:
            return self._client.execute_command("EVALSHA", script.sha, 0, *args, **_NEVER_DECODE)
        except _NoScript:  # a restarted or flushed server: load it again
            self._client.script_load(script.script)
            return self._client.execute_command("EVALSHA", script.sha, 0, *args, **_NEVER_DECODE)

    def _synced(self, ns: str, dimension: int) -> _Matrix:
        """The namespace's cached matrix, caught up with Redis (call under the lock)."""
        cached = self._cache.get(ns)
        if cached is not None:
            reply = self._eval_bytes(self._delta, [self.prefix, ns, cached.version, DELTA_LIMIT])
            version = int(reply[0])
            if len(reply) == 4:
                for raw_id, raw in zip(reply[2], reply[3], strict=True):
                    cached.put(raw_id.decode("utf-8"), raw or None)
            if len(reply) == 4 or version == cached.version:
                cached.version = version
                self._cache.move_to_end(ns)
                return cached
        # Version first: a write landing in between is replayed by the next delta.
        pipe = self._client.pipeline(transaction=False)
        pipe.hget(self._k("m:", ns), "ver")
        pipe.execute_command("HGETALL", self._k("v:", ns), **_NEVER_DECODE)
        version, pairs = pipe.execute()
        matrix = _Matrix(dimension, int(version or 0))
        matrix.load(pairs)
        self._cache[ns] = matrix
        self._cache.move_to_end(ns)
        total = sum(m.nbytes for m in self._cache.values())
        while total > self.cache_bytes and len(self._cache) > 1:
            total -= self._cache.popitem(last=False)[1].nbytes
        return matrix

    def search_namespaces(
        self, vector: Sequence[float], top_k: int, keys: list[str] | None
    ) -> list[SearchHit]:
        """The ``top_k`` chunks closest by cosine (of ``keys``), best first."""
        dimension = self.dimension
        if dimension is None:
            return []
        query = _unit_query(vector, dimension)

        def run() -> list[SearchHit]:
            found: list[tuple[str, str, float]] = []
            with self._lock:
                for ns in self._names(keys):
                    found += [(ns, i, s) for i, s in self._synced(ns, dimension).top(query, top_k)]
            return self._hits(found, top_k)

        return self._call(run)

    def search_spans(
        self,
        vector: Sequence[float],
        top_k: int,
        keys: list[str],
        spans: Sequence[tuple[float, float]],
    ) -> list[SearchHit]:
        """See :class:`~fastaiagent.facts.vectors.ListsRecorded`: the ids of the spans
        from ``rt:<ns>`` (one round trip), ranked in this process's matrix."""
        dimension = self.dimension
        if dimension is None:
            return []
        query = _unit_query(vector, dimension)
        bounds = [(float(a), float(b)) for a, b in spans]

        def run() -> list[SearchHit]:
            found: list[tuple[str, str, float]] = []
            for ns in self._names(keys):
                pipe, key = self._client.pipeline(transaction=False), self._k("rt:", ns)
                for start, end in bounds:
                    pipe.zrangebyscore(key, repr(start), f"({end!r}", 0, RECORDED_LIMIT + 1)
                wanted = list(dict.fromkeys(i for ids in pipe.execute() for i in ids))
                if not wanted or len(wanted) > RECORDED_LIMIT:
                    continue
                with self._lock:
                    found += [(ns, i, s) for i, s in self._synced(ns, dimension).among(wanted, query)]
            return self._hits(found, top_k)

        return self._call(run)

    def _hits(self, found: list[tuple[str, str, float]], top_k: int) -> list[SearchHit]:
        """The ``top_k`` best of ``(escaped namespace, id, score)`` as hits, their
        chunks read in one round trip; ones deleted since the catch-up are left out."""
        found.sort(key=lambda hit: -hit[2])
        best = found[:top_k]
        docs = self._docs([(ns, chunk_id) for ns, chunk_id, _ in best])
        return [
            SearchHit(_chunk(chunk_id, doc), score)
            for (_, chunk_id, score), doc in zip(best, docs, strict=True)
            if doc is not None
        ]

    def _docs(self, wanted: list[tuple[str, str]]) -> list[str | None]:
        """The stored JSON of these (escaped namespace, id) pairs, in order."""
        if not wanted:
            return []
        pipe = self._client.pipeline(transaction=False)
        for ns, chunk_id in wanted:
            pipe.hget(self._k("d:", ns), chunk_id)
        return list(pipe.execute())

    def keyword_search(self, query: str, top_k: int, *, namespace: str) -> list[tuple[str, float]]:
        """``(chunk id, BM25 score)`` of the ``top_k`` best keyword matches in
        ``namespace``; reads only the query terms' postings (one round trip)."""
        check_top_k(top_k)
        wanted_keys(namespace, False)  # validates
        terms = sorted(set(tokenize(query)))
        if not terms or top_k == 0:
            return []
        ns = escape_part(namespace)

        def run() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            pipe.hlen(self._k("d:", ns))
            pipe.hget(self._k("m:", ns), "tot")
            for term in terms:
                pipe.hgetall(self._k("p:", f"{ns}:{term}"))
            return list(pipe.execute())

        n_docs, total, *postings = self._call(run)
        n_docs = int(n_docs)
        if n_docs == 0:
            return []
        base = _K1 * (1.0 - _B)
        slope = _K1 * _B / ((int(total or 0) / n_docs) or 1.0)
        scores: dict[str, float] = {}
        for docs in postings:
            if not docs:
                continue
            gain = math.log(1.0 + (n_docs - len(docs) + 0.5) / (len(docs) + 0.5)) * (_K1 + 1)
            for chunk_id, posting in docs.items():
                tf, length = map(int, posting.split(" "))
                scores[chunk_id] = scores.get(chunk_id, 0.0) + gain * tf / (
                    tf + base + slope * length
                )
        best = heapq.nlargest(top_k, scores, key=scores.__getitem__)
        return [(chunk_id, scores[chunk_id]) for chunk_id in best]

    def ids(self, namespace: str) -> set[str]:
        """Every chunk id ``namespace`` holds."""
        wanted_keys(namespace, False)  # validates
        key = self._k("d:", escape_part(namespace))
        return set(self._call(lambda: self._client.hkeys(key)))

    def get(self, ids: Sequence[str]) -> list[Chunk]:
        """The chunks with these ids that exist, in the order asked (no vectors)."""
        wanted = id_list(ids, "get")
        if not wanted:
            return []

        def run() -> list[Chunk]:
            where = self._client.hmget(self._k("id"), wanted)
            pairs = [(ns, i) for ns, i in zip(where, wanted, strict=True) if ns is not None]
            docs = self._docs(pairs)
            return [_chunk(i, doc) for (_, i), doc in zip(pairs, docs, strict=True) if doc]

        return self._call(run)

    def chunks(self, namespace: str | None, *, include_untagged: bool = False) -> list[Chunk]:
        """Every chunk of a namespace (``None``: of every namespace), without vectors."""
        keys = wanted_keys(namespace, include_untagged)

        def run() -> list[Chunk]:
            pipe = self._client.pipeline(transaction=False)
            for ns in self._names(keys):
                pipe.hgetall(self._k("d:", ns))
            return [_chunk(i, doc) for docs in pipe.execute() for i, doc in docs.items()]

        return self._call(run)

    def count(self, namespace: str | None = None) -> int:
        """How many chunks the index (or one namespace) holds."""
        if namespace is None:
            return int(self._call(lambda: self._client.hlen(self._k("id"))))
        wanted_keys(namespace, False)  # validates
        key = self._k("d:", escape_part(namespace))
        return int(self._call(lambda: self._client.hlen(key)))

    def close(self) -> None:
        """Drop this process's cached matrices; the client belongs to the fact store."""
        with self._lock:
            self._cache.clear()


__all__ = ["DELTA_LIMIT", "VECTORS_LAYOUT", "RedisVectorIndex"]
