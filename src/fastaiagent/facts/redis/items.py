"""Namespaced items in Redis, on the fact store's client (its pool is fork-aware).

Key layout under ``<prefix>:it:`` (``<ns>`` is the encoded namespace, see
:func:`fastaiagent.facts.items.encode_namespace`):

- ``ns`` - every namespace that holds items (sorted set, lexical order)
- ``k:<ns>`` - the namespace's keys (sorted set, lexical order)
- ``v:<ns>`` - key -> value (hash)
- ``m:<ns>`` - key -> ``"<created> <updated> <expires> <ttl>"`` (hash; ``-`` for none)
- ``exp`` - expiring items by expiry time (member: ``<len(ns)>:<ns><key>``)
- ``layout`` - the items layout version (``ITEMS_LAYOUT``)

Every operation is one script call, so a batch of writes is atomic and a scan
is one round trip. Expired items are skipped by reads and swept now and then.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

from fastaiagent.errors import InvalidTypeError
from fastaiagent.facts.items import (
    ItemFront,
    ItemScan,
    ItemWrite,
    StoredItem,
    decode_namespace,
    encode_namespace,
)
from fastaiagent.facts.redis.client import unavailable
from fastaiagent.facts.redis.layout import recorded_layout
from fastaiagent.facts.redis.store import RedisFactStore

ITEMS_LAYOUT = "1"

# Shared by the scripts: is a meta string live at `now`; delete one item.
_COMMON = """
local p = ARGV[2]
local now = tonumber(ARGV[1])
local function live(meta)
  if not meta then return false end
  local exp = string.match(meta, '^%S+ %S+ (%S+)')
  return exp == '-' or tonumber(exp) > now
end
local function drop(ns, key)
  redis.call('HDEL', p .. 'm:' .. ns, key)
  redis.call('HDEL', p .. 'v:' .. ns, key)
  redis.call('ZREM', p .. 'k:' .. ns, key)
  redis.call('ZREM', p .. 'exp', #ns .. ':' .. ns .. key)
  if redis.call('ZCARD', p .. 'k:' .. ns) == 0 then redis.call('ZREM', p .. 'ns', ns) end
end
"""

# ARGV: now, p, guarded ('1': all or nothing), then per write: op (p put, a
# add-if-absent, d delete; c put / x delete if the value is `expected`), ns, key,
# value, ttl ('-' none), expires ('-' none), expected. Returns 1/0 per write
# (changed); guarded, {} when a conditional write would not apply (nothing written).
_WRITE = _COMMON + """
local function applies(op, ns, key, expected)
  local alive = live(redis.call('HGET', p .. 'm:' .. ns, key))
  if op == 'a' then return not alive end
  if op == 'c' or op == 'x' then return alive and redis.call('HGET', p .. 'v:' .. ns, key) == expected end
  return true
end
if ARGV[3] == '1' then
  for i = 4, #ARGV, 7 do
    if not applies(ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+6]) then return {} end
  end
end
local out = {}
for i = 4, #ARGV, 7 do
  local op, ns, key, value, ttl, exp = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3], ARGV[i+4], ARGV[i+5]
  local meta = redis.call('HGET', p .. 'm:' .. ns, key)
  local alive = live(meta)
  if (op == 'c' or op == 'x') and not applies(op, ns, key, ARGV[i+6]) then
    out[#out + 1] = 0
  elseif op == 'd' or op == 'x' then
    if meta then drop(ns, key) end
    out[#out + 1] = alive and 1 or 0
  elseif op == 'a' and alive then
    out[#out + 1] = 0
  else
    local created = ARGV[1]
    if alive then created = string.match(meta, '^(%S+)') end
    redis.call('HSET', p .. 'm:' .. ns, key, created .. ' ' .. ARGV[1] .. ' ' .. exp .. ' ' .. ttl)
    redis.call('HSET', p .. 'v:' .. ns, key, value)
    redis.call('ZADD', p .. 'k:' .. ns, 0, key)
    redis.call('ZADD', p .. 'ns', 0, ns)
    if exp == '-' then
      redis.call('ZREM', p .. 'exp', #ns .. ':' .. ns .. key)
    else
      redis.call('ZADD', p .. 'exp', tonumber(exp), #ns .. ':' .. ns .. key)
    end
    out[#out + 1] = 1
  end
end
return out
"""

# ARGV: now, p, ns, refresh ('1'/'0'), keys... Returns {meta, value} per key ({} if none).
_GET = _COMMON + """
local ns = ARGV[3]
local out = {}
for i = 5, #ARGV do
  local key = ARGV[i]
  local meta = redis.call('HGET', p .. 'm:' .. ns, key)
  if live(meta) then
    local c, u, e, ttl = string.match(meta, '^(%S+) (%S+) (%S+) (%S+)')
    if ARGV[4] == '1' and ttl ~= '-' then
      e = tostring(now + tonumber(ttl))
      meta = c .. ' ' .. u .. ' ' .. e .. ' ' .. ttl
      redis.call('HSET', p .. 'm:' .. ns, key, meta)
      redis.call('ZADD', p .. 'exp', tonumber(e), #ns .. ':' .. ns .. key)
    end
    out[#out + 1] = {meta, redis.call('HGET', p .. 'v:' .. ns, key)}
  else
    out[#out + 1] = {}
  end
end
return out
"""

# ARGV: now, p, lo, hi, exact ('1'/'0'), before ('' none; else '(' .. key),
# descending ('1'/'0'), limit (-1 all), offset. Returns a flat list ns, key, meta, value.
_SCAN = _COMMON + """
local lo, hi, before, desc = ARGV[3], ARGV[4], ARGV[6], ARGV[7] == '1'
local limit, skip = tonumber(ARGV[8]), tonumber(ARGV[9])
local nss
if ARGV[5] == '1' then nss = {lo}
elseif desc then nss = redis.call('ZREVRANGEBYLEX', p .. 'ns', '(' .. hi, '[' .. lo)
else nss = redis.call('ZRANGEBYLEX', p .. 'ns', '[' .. lo, '(' .. hi) end
local out, n, batch = {}, 0, 200
if limit >= 0 and limit + skip < batch then batch = limit + skip + 1 end  -- read no more than asked
for _, ns in ipairs(nss) do
  local start = 0
  while limit < 0 or n < limit do
    local keys
    if desc then
      keys = redis.call('ZREVRANGEBYLEX', p .. 'k:' .. ns, before ~= '' and before or '+', '-', 'LIMIT', start, batch)
    else
      keys = redis.call('ZRANGEBYLEX', p .. 'k:' .. ns, '-', before ~= '' and before or '+', 'LIMIT', start, batch)
    end
    if #keys == 0 then break end
    local metas = redis.call('HMGET', p .. 'm:' .. ns, unpack(keys))
    for j, key in ipairs(keys) do
      if live(metas[j]) then
        if skip > 0 then skip = skip - 1
        elseif limit < 0 or n < limit then
          n = n + 1
          out[#out + 1] = ns; out[#out + 1] = key; out[#out + 1] = metas[j]
          out[#out + 1] = redis.call('HGET', p .. 'v:' .. ns, key)
        end
      end
    end
    start = start + batch
  end
  if limit >= 0 and n >= limit then break end
end
return out
"""

# ARGV: now, p, max. Deletes up to `max` expired items; returns how many.
_PURGE = _COMMON + """
local members = redis.call('ZRANGEBYSCORE', p .. 'exp', '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
for _, member in ipairs(members) do
  local len, rest = string.match(member, '^(%d+):(.*)$')
  local ns = string.sub(rest, 1, tonumber(len))
  local key = string.sub(rest, tonumber(len) + 1)
  drop(ns, key)
  redis.call('ZREM', p .. 'exp', member)
end
return #members
"""

# ARGV: now, p, lo, hi. Namespaces in [lo, hi) that hold a live item.
_NAMESPACES = _COMMON + """
local out = {}
for _, ns in ipairs(redis.call('ZRANGEBYLEX', p .. 'ns', '[' .. ARGV[3], '(' .. ARGV[4])) do
  for _, meta in ipairs(redis.call('HVALS', p .. 'm:' .. ns)) do
    if live(meta) then out[#out + 1] = ns; break end
  end
end
return out
"""

# ARGV: now, p, lo, hi. Deletes every namespace in [lo, hi); returns the item count.
_DELETE_PREFIX = _COMMON + """
local count = 0
for _, ns in ipairs(redis.call('ZRANGEBYLEX', p .. 'ns', '[' .. ARGV[3], '(' .. ARGV[4])) do
  for _, key in ipairs(redis.call('ZRANGE', p .. 'k:' .. ns, 0, -1)) do
    drop(ns, key)
    count = count + 1
  end
end
return count
"""


def _num(text: str) -> float | None:
    return None if text == "-" else float(text)


def _item(ns: str, key: str, meta: str, value: str) -> StoredItem:
    created, updated, expires, ttl = meta.split(" ")
    return StoredItem(
        decode_namespace(ns), key, value, float(created), float(updated), _num(expires), _num(ttl)
    )


def _write_args(batch: list[ItemWrite], now: float) -> list[Any]:
    args: list[Any] = []
    for w in batch:
        if w.if_value is not None:
            op = "x" if w.value is None else "c"
        else:
            op = "d" if w.value is None else ("a" if w.if_absent else "p")
        ttl = "-" if w.ttl_seconds is None else repr(float(w.ttl_seconds))
        exp = "-" if w.ttl_seconds is None else repr(now + w.ttl_seconds)
        args += [op, encode_namespace(w.namespace), w.key, w.value or "", ttl, exp, w.if_value or ""]
    return args


class RedisItemStore(ItemFront):
    """Items in Redis next to a :class:`RedisFactStore`'s facts, on its client (the
    :class:`~fastaiagent.facts.items.ItemStore` contract). Expiry uses the
    clients' clocks."""

    def __init__(self, store: RedisFactStore) -> None:
        if not isinstance(store, RedisFactStore):
            raise InvalidTypeError(f"RedisItemStore needs a RedisFactStore, got {type(store).__name__}")
        self.store = store
        self.prefix = store.companion_prefix("it")
        self._client: Any = store.client
        script = self._client.register_script
        self._write, self._get, self._scan = script(_WRITE), script(_GET), script(_SCAN)
        self._purge, self._namespaces = script(_PURGE), script(_NAMESPACES)
        self._delete_prefix = script(_DELETE_PREFIX)
        self._checked = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RedisItemStore(prefix={self.prefix!r})"

    def _call(self, script: Any, *args: Any) -> Any:
        with unavailable("the item store"):
            self._check_layout()
            full = [repr(time.time()), self.prefix, *args]
            write = script is not self._scan and script is not self._namespaces
            return self.store.run_script(script, [], full, route=self.prefix + "layout", write=write)

    def _check_layout(self) -> None:
        if self._checked:
            return
        with self._lock:
            key, what = self.prefix + "layout", f"the Redis items under {self.prefix!r}"
            if not recorded_layout(self._client, key, ITEMS_LAYOUT, what, plural=True):
                self._client.set(key, ITEMS_LAYOUT, nx=True)
            self._checked = True

    def write_batch(self, batch: list[ItemWrite], now: float) -> list[bool]:
        """Apply a checked batch atomically (one script call)."""
        return [bool(c) for c in self._call(self._write, "0", *_write_args(batch, now))]

    def write_guarded(self, batch: list[ItemWrite], now: float) -> bool:
        """Apply a checked batch atomically when each conditional write applies (one
        script call: the conditions are read and the writes made with no other
        command between)."""
        return bool(self._call(self._write, "1", *_write_args(batch, now)))

    def read_items(self, ns: str, keys: list[str], refresh_ttl: bool) -> Iterable[StoredItem]:
        """The live items of ``keys`` (one script call, which restarts their expiry
        when asked)."""
        found = self._call(self._get, ns, "1" if refresh_ttl else "0", *keys)
        return [_item(ns, k, *row) for k, row in zip(keys, found, strict=True) if row]

    def scan_items(self, scan: ItemScan) -> list[StoredItem]:
        """Live items of a checked scan, in (namespace, key) order (one script call)."""
        flat = self._call(
            self._scan,
            scan.low,
            scan.high,
            "1" if scan.exact else "0",
            "" if scan.before is None else "(" + scan.before,
            "1" if scan.descending else "0",
            -1 if scan.limit is None else scan.limit,
            scan.offset,
        )
        return [_item(*flat[i : i + 4]) for i in range(0, len(flat), 4)]

    def read_namespaces(self, low: str, high: str) -> list[str]:
        """Encoded namespaces in ``[low, high)`` with a live item."""
        return list(self._call(self._namespaces, low, high))

    def delete_range(self, low: str, high: str) -> int:
        """Delete every item of the namespaces in ``[low, high)``."""
        return int(self._call(self._delete_prefix, low, high))

    def purge_expired(self) -> int:
        """Delete expired items now, in script calls of at most 500; returns the count."""
        total = 0
        while True:
            done = int(self._call(self._purge, 500))
            total += done
            if done < 500:
                return total
