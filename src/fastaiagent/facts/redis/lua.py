"""The Lua scripts of :class:`~fastaiagent.facts.redis.store.RedisFactStore`.

Every write is one script call, so Redis runs it atomically: no WATCH, no
client-side retries, and a connection lost before the call lands writes
nothing. Each write script is ``LIBRARY`` followed by its own body; the
library builds key names exactly as ``redis.py`` documents them.

Conventions: ``ARGV[1]`` is always the escaped key prefix; subjects are passed
as their escaped parts (project, scope, scope_id); ids travel as decimal
strings; sorted-set members are ids zero-padded to 20 digits. A refused write
returns a table ``{code, ...}`` (``missing``, ``subject``, ``inactive``,
``taken``) that the store turns into the usual exception; success returns the
id (a string) or a count.
"""

from __future__ import annotations

# Helpers shared by the write scripts (prepended to each).
LIBRARY = """
local P = ARGV[1]
local C = false  -- the cluster layout (see CLUSTER_MARK): every key of a subject in its slot
-- Cluster: KEYS[1] is the slot's id counter, "<P>:seq:{<tag>}:<slot>"; the slot's
-- fact hashes, prev sets and subjects set carry the same tag.
local TAG, SLOT = nil, nil
if C then TAG, SLOT = string.match(KEYS[1], '(%b{}):(%d+)$') end
local function pad(id) return string.rep('0', 20 - #id) .. id end
local function esc(s)
  s = string.gsub(string.gsub(s, '%%', '%%25'), ':', '%%3A')
  if C then s = string.gsub(string.gsub(s, '{', '%%7B'), '}', '%%7D') end
  return s
end
-- A subject's keys. Cluster: named with its hash tag, the indexes that are global
-- on one server (expiry, retired) are the subject's own, the subjects set is its
-- slot's, and the scope and all indexes are not kept (the store walks subjects).
local function subject(project, scope, sid)
  local s = project .. ':' .. scope .. ':' .. sid
  if C then
    local t = '{' .. s .. '}'
    return {member = s, active = P .. ':active:' .. t, rows = P .. ':rows:' .. t,
            hist = P .. ':hist:' .. t, key = P .. ':key:' .. t .. ':',
            old = P .. ':old:' .. t .. ':', exp = P .. ':exp:' .. t,
            fact = P .. ':fact:' .. TAG .. ':', prev = P .. ':prev:' .. TAG .. ':',
            expiry = P .. ':expiry:' .. t, retired = P .. ':retired:' .. t,
            subjects = P .. ':subjects:' .. TAG}
  end
  return {member = s, active = P .. ':active:' .. s, rows = P .. ':rows:' .. s,
          hist = P .. ':hist:' .. s, key = P .. ':key:' .. s .. ':',
          old = P .. ':old:' .. s .. ':', exp = P .. ':exp:' .. s,
          fact = P .. ':fact:', prev = P .. ':prev:', expiry = P .. ':expiry',
          retired = P .. ':retired', scope = P .. ':scope:' .. project .. ':' .. scope,
          all = P .. ':all', subjects = P .. ':subjects'}
end
-- A fact's hash: P:fact:<id> on one server, P:fact:{<slot tag>}:<id> in a cluster
-- (the id tells its slot: id % 16384), whatever its subject.
local function fact_key(id)
  if C then return P .. ':fact:' .. TAG .. ':' .. id end
  return P .. ':fact:' .. id
end
local function zadd(key, score, m) if key then redis.call('ZADD', key, score, m) end end
local function zrem(key, m) if key then redis.call('ZREM', key, m) end end
local function active_id(s, content_key)
  local id = redis.call('GET', content_key)
  if id and redis.call('HGET', fact_key(id), 'superseded_by') == '' then return id end
  return false
end
-- A subject's rows carry one marker member (score +inf, so it is read first) while
-- the subject has facts with an end: "~" .. the latest valid_to among them. A read
-- whose "now" is past it needs nothing from the `exp` set: a plain ZREVRANGE.
local function mark(s)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', s.rows, '+inf', '+inf')) do
    redis.call('ZREM', s.rows, m)
  end
  local top = redis.call('ZREVRANGE', s.exp, 0, 0, 'WITHSCORES')
  if #top > 0 then redis.call('ZADD', s.rows, '+inf', '~' .. top[2]) end
end
-- A new active fact; ARGV from `at`: score, row head, row tail, digest, valid_to
-- ('' for none), then the hash's field/value pairs. The row gets its id here, where
-- it is known (a cluster's: the slot's counter * 16384 + the slot, unique and
-- naming its slot). A fact with an end is read from the subject's `exp` set (by
-- valid_to) instead of its rows, so expired facts are never read.
local function create(s, at)
  local id
  if C then id = string.format('%d', redis.call('INCR', KEYS[1]) * 16384 + tonumber(SLOT))
  else id = string.format('%d', redis.call('INCR', P .. ':seq')) end
  local m, score, ends = pad(id), ARGV[at], ARGV[at + 4]
  local row = ARGV[at + 1] .. ',' .. id .. ',' .. ARGV[at + 2]
  redis.call('HSET', fact_key(id), 'row', row, unpack(ARGV, at + 5))
  redis.call('SET', s.key .. ARGV[at + 3], id)
  redis.call('ZADD', s.active, score, m)
  if ends ~= '' then
    redis.call('ZADD', s.exp, ends, m .. row)
    redis.call('ZADD', s.expiry, ends, m)
    mark(s)
  else
    redis.call('ZADD', s.rows, score, m .. row)
  end
  zadd(s.scope, score, m)
  zadd(s.all, score, m)
  redis.call('SADD', s.hist, id)
  redis.call('SADD', s.subjects, s.member)
  return id
end
-- Supersedes one fact at `when`; its text's set of superseded ids gets it (delete
-- by text), its replacement's `prev` set too (history), `retired` its time (pruning).
local function retire(s, id, by, row, digest, when)
  local m = pad(id)
  redis.call('HSET', fact_key(id), 'superseded_by', by, 'superseded_at', when)
  if digest then redis.call('SADD', s.old .. digest, id) end
  redis.call('ZREM', s.active, m)
  zrem(s.scope, m)
  redis.call('ZREM', s.expiry, m)
  redis.call('ZADD', s.retired, when, m)
  redis.call('SADD', s.prev .. by, id)
  if row then
    redis.call('ZREM', s.rows, m .. row)
    if redis.call('ZREM', s.exp, m .. row) == 1 then mark(s) end
  end
  if digest and redis.call('GET', s.key .. digest) == id then
    redis.call('DEL', s.key .. digest)
  end
end
-- Hard-deletes one fact and every index entry of it; the subject comes from
-- the hash (or `s` for an id whose hash is already gone; in a cluster `s` is
-- always given). Returns 1 if the fact existed, and its subject.
local function drop(id, s)
  local h = redis.call('HMGET', fact_key(id), 'scope', 'scope_id', 'project_id', 'row',
                       'digest', 'superseded_by')
  if h[1] then s = subject(esc(h[3]), esc(h[1]), esc(h[2])) end
  local m = pad(id)
  redis.call('DEL', fact_key(id))
  redis.call('ZREM', s.active, m)
  zrem(s.scope, m)
  zrem(s.all, m)
  redis.call('ZREM', s.expiry, m)
  redis.call('ZREM', s.retired, m)
  redis.call('DEL', s.prev .. id)
  if (h[6] or '') ~= '' then redis.call('SREM', s.prev .. h[6], id) end
  redis.call('SREM', s.hist, id)
  if h[4] then
    redis.call('ZREM', s.rows, m .. h[4])
    if redis.call('ZREM', s.exp, m .. h[4]) == 1 then mark(s) end
  end
  if h[5] and redis.call('GET', s.key .. h[5]) == id then redis.call('DEL', s.key .. h[5]) end
  if h[5] and (h[6] or '') ~= '' then redis.call('SREM', s.old .. h[5], id) end
  if h[1] then return 1, s end
  return 0, s
end
-- A subject with no facts left leaves no keys behind.
local function finish(s)
  if redis.call('SCARD', s.hist) == 0 then
    redis.call('SREM', s.subjects, s.member)
    redis.call('DEL', s.active, s.rows, s.exp)
  end
end
"""

CLUSTER_MARK = "local C = false"
"""The line :func:`for_cluster` turns on."""


def for_cluster(script: str) -> str:
    """A write script in its cluster form (subject keys with their hash tag)."""
    return script.replace(CLUSTER_MARK, "local C = true", 1)

# ARGV: prefix, project, scope, scope_id, score, row head, row tail, digest,
# valid_to, fields... The same normalised text in the same subject returns the
# active fact's id, unless that one expired by the new one's time: then the new
# fact replaces it.
ADD = (
    LIBRARY
    + """
local s = subject(ARGV[2], ARGV[3], ARGV[4])
local id = active_id(s, s.key .. ARGV[8])
if not id then return create(s, 5) end
local h = redis.call('HMGET', fact_key(id), 'valid_to', 'row')
if (h[1] or '') == '' or tonumber(h[1]) > tonumber(ARGV[5]) then return id end
local new = create(s, 5)
retire(s, id, new, h[2], ARGV[8], ARGV[5])
return new
"""
)

# ARGV: prefix, project, scope, scope_id, old id, score, row head, row tail,
# digest, valid_to, fields... The old fact is superseded at the new one's score.
# Adds the new fact (or reuses the active one with its text) and supersedes the
# old one, in one step; a refusal writes nothing. An old id of another subject
# is refused as one that does not exist ('elsewhere'): nothing of it is told.
UPDATE = (
    LIBRARY
    + """
local s, old = subject(ARGV[2], ARGV[3], ARGV[4]), ARGV[5]
local h = redis.call('HMGET', fact_key(old), 'scope', 'scope_id', 'project_id',
                     'superseded_by', 'row', 'digest')
local existing = active_id(s, s.key .. ARGV[9])
if existing == old then return old end
if not h[1] or esc(h[3]) ~= ARGV[2] or h[1] ~= ARGV[3] or esc(h[2]) ~= ARGV[4] then
  return {'elsewhere', old}
end
local by = h[4] or ''
if by ~= '' and by ~= existing then return {'taken', old, by} end
local new = existing or create(s, 6)
if by ~= new then retire(s, old, new, h[5], h[6], ARGV[6]) end
return new
"""
)

# ARGV: prefix, old id, new id, when (in a cluster both of the call's slot). The
# rules of scoping.check_supersede, checked where they cannot change underneath.
SUPERSEDE = (
    LIBRARY
    + """
local old, new = ARGV[2], ARGV[3]
local o = redis.call('HMGET', fact_key(old), 'scope', 'scope_id', 'project_id',
                     'superseded_by', 'row', 'digest')
local n = redis.call('HMGET', fact_key(new), 'scope', 'scope_id', 'project_id',
                     'superseded_by')
if not n[1] then return {'missing', new} end
if not o[1] or o[1] ~= n[1] or o[2] ~= n[2] or o[3] ~= n[3] then
  return {'elsewhere', old, n[1], n[2], n[3]}
end
if (n[4] or '') ~= '' then return {'inactive', new} end
local by = o[4] or ''
if by == new then return 'ok' end
if by ~= '' then return {'taken', old, by} end
retire(subject(esc(o[3]), esc(o[1]), esc(o[2])), old, new, o[5], o[6], ARGV[4])
return 'ok'
"""
)

# ARGV: prefix, project, scope, scope_id, id, normalised text ('' = any).
# Deletes one fact of this subject; returns 1, or 0 when it is not there.
DELETE_ID = (
    LIBRARY
    + """
local s, id = subject(ARGV[2], ARGV[3], ARGV[4]), ARGV[5]
if redis.call('SISMEMBER', s.hist, id) == 0 then return 0 end
if ARGV[6] ~= '' and redis.call('HGET', fact_key(id), 'fact_key') ~= ARGV[6] then
  return 0
end
local n = drop(id, s)
finish(s)
return n
"""
)

# ARGV: prefix, project, scope, scope_id, normalised text, digest, count. One
# bounded step of deleting every fact of the subject with this text: the
# active one through its content key, then up to `count` superseded ones from
# the text's set of them (never by reading the subject). Returns {deleted,
# taken from the set} - done when the second is below count.
DELETE_TEXT = (
    LIBRARY
    + """
local s, text, digest = subject(ARGV[2], ARGV[3], ARGV[4]), ARGV[5], ARGV[6]
local n = 0
local id = redis.call('GET', s.key .. digest)
if id then
  local h = redis.call('HMGET', fact_key(id), 'fact_key', 'superseded_by')
  if h[1] == text and (h[2] or '') == '' then n = n + drop(id, s) end
end
local ids = redis.call('SPOP', s.old .. digest, ARGV[7])
local others = {}
for _, old in ipairs(ids) do
  local key = redis.call('HGET', fact_key(old), 'fact_key')
  if key == text then n = n + drop(old, s)
  elseif key then others[#others + 1] = old end  -- another text of the same digest
end
if #others > 0 then redis.call('SADD', s.old .. digest, unpack(others)) end
finish(s)
return {n, #ids - #others}
"""
)

# ARGV: prefix, project, scope, scope_id, count. One bounded step of deleting
# a whole subject (history too); returns {deleted, ids taken} - done when the
# second is below count.
DELETE_SOME = (
    LIBRARY
    + """
local s = subject(ARGV[2], ARGV[3], ARGV[4])
local ids = redis.call('SPOP', s.hist, ARGV[5])
local n = 0
for _, id in ipairs(ids) do n = n + drop(id, s) end
finish(s)
return {n, #ids}
"""
)

# KEYS[#KEYS]: an active index (a subject's, or a scope's for "*" on one server).
# ARGV: prefix, keep, budget, the learned source. Deletes up to `budget` run-learned active facts beyond the newest
# `keep` (newest first: created_at, then id); returns how many - call again
# while that equals the budget.
PRUNE_LEARNED = (
    LIBRARY
    + """
local keep, budget = tonumber(ARGV[2]), tonumber(ARGV[3])
local seen, doomed, start = 0, {}, 0
while #doomed < budget do
  local members = redis.call('ZREVRANGE', KEYS[#KEYS], start, start + 499)
  if #members == 0 then break end
  for _, m in ipairs(members) do
    local id = string.format('%d', tonumber(m))
    local h = redis.call('HMGET', fact_key(id), 'source', 'superseded_by')
    if h[1] == ARGV[4] and h[2] == '' then
      seen = seen + 1
      if seen > keep then
        doomed[#doomed + 1] = id
        if #doomed >= budget then break end
      end
    end
  end
  start = start + 500
end
local touched = {}
for _, id in ipairs(doomed) do
  local _, s = drop(id, nil)
  touched[s.member] = s
end
for _, s in pairs(touched) do finish(s) end
return #doomed
"""
)

# ARGV: prefix, project, scope, scope_id, id, score, normalised text, digest,
# row. Indexes one fact hash (an older layout's, or one an older writer
# wrote): fills the fields this layout adds and puts it in the indexes its
# state calls for. Reads the state here, so a fact superseded meanwhile is
# never put back as active. Writes nothing when all is in place.
INDEX = (
    LIBRARY
    + """
local s, id = subject(ARGV[2], ARGV[3], ARGV[4]), ARGV[5]
local key = fact_key(id)
local h = redis.call('HMGET', key, 'fact', 'fact_key', 'superseded_by', 'row', 'doc', 'digest',
                     'valid_to', 'superseded_at')
if not h[1] then return 0 end
if h[2] ~= ARGV[7] then redis.call('HSET', key, 'fact_key', ARGV[7]) end
if not h[3] then redis.call('HSET', key, 'superseded_by', '') end
local row = h[4] or ARGV[9]
if not h[4] then redis.call('HSET', key, 'row', row) end
if h[5] then redis.call('HDEL', key, 'doc') end
if h[6] ~= ARGV[8] then redis.call('HSET', key, 'digest', ARGV[8]) end
local m, score = pad(id), ARGV[6]
zadd(s.all, score, m)
redis.call('SADD', s.hist, id)
redis.call('SADD', s.subjects, s.member)
if (h[3] or '') == '' then
  redis.call('ZADD', s.active, score, m)
  zadd(s.scope, score, m)
  if (h[7] or '') ~= '' then
    redis.call('ZADD', s.exp, h[7], m .. row)
    redis.call('ZADD', s.expiry, h[7], m)
    mark(s)
  else
    redis.call('ZADD', s.rows, score, m .. row)
  end
  redis.call('SET', s.key .. ARGV[8], id, 'NX')
else
  redis.call('ZREM', s.active, m)
  zrem(s.scope, m)
  redis.call('ZREM', s.rows, m .. row)
  redis.call('ZREM', s.exp, m .. row)
  redis.call('SADD', s.old .. ARGV[8], id)
  -- layout 6: when it was superseded (an older layout's: its replacement's time)
  local at = h[8]
  if not at or at == '' then
    at = redis.call('HGET', fact_key(h[3]), 'created_at') or score
    redis.call('HSET', key, 'superseded_at', at)
  end
  redis.call('ZADD', s.retired, at, m)
  redis.call('SADD', s.prev .. h[3], id)
end
return 1
"""
)

# ARGV: prefix, project, scope, scope_id, id, valid_to, the fact's new row. Ends
# one active fact of this subject at valid_to: it moves to the subject's `exp`
# set. Returns 1, or 0 when no active fact of the subject has that id.
EXPIRE = (
    LIBRARY
    + """
local s, id = subject(ARGV[2], ARGV[3], ARGV[4]), ARGV[5]
if redis.call('SISMEMBER', s.hist, id) == 0 then return 0 end
local h = redis.call('HMGET', fact_key(id), 'superseded_by', 'row')
if (h[1] or '') ~= '' then return 0 end
local m = pad(id)
if h[2] then
  redis.call('ZREM', s.rows, m .. h[2])
  redis.call('ZREM', s.exp, m .. h[2])
end
redis.call('HSET', fact_key(id), 'valid_to', ARGV[6], 'row', ARGV[7])
redis.call('ZADD', s.exp, ARGV[6], m .. ARGV[7])
redis.call('ZADD', s.expiry, ARGV[6], m)
mark(s)
return 1
"""
)

# ARGV: prefix, cutoff, budget, '1' to keep to one project (else '0'), that
# project (cluster: then the subject's parts: its own expiry and retired sets).
# Deletes up to `budget` facts that expired (`expiry`, by valid_to) or were
# superseded (`retired`, by superseded_at) at or before the cutoff; returns how
# many - call again while that equals the budget.
PRUNE_HISTORY = (
    LIBRARY
    + """
local budget, n, touched, S = tonumber(ARGV[3]), 0, {}, nil
local indexes = {P .. ':expiry', P .. ':retired'}
if C then
  S = subject(ARGV[6], ARGV[7], ARGV[8])
  indexes = {S.expiry, S.retired}
end
for _, index in ipairs(indexes) do
  local skipped = 0
  while n < budget do
    local members = redis.call('ZRANGEBYSCORE', index, '-inf', ARGV[2], 'LIMIT', skipped, 200)
    if #members == 0 then break end
    for _, m in ipairs(members) do
      local id = string.format('%d', tonumber(m))
      local project = redis.call('HGET', fact_key(id), 'project_id')
      if not project then
        redis.call('ZREM', index, m)  -- a stale entry
      elseif ARGV[4] == '1' and project ~= ARGV[5] then
        skipped = skipped + 1
      else
        local _, s = drop(id, S)
        touched[s.member] = s
        n = n + 1
        if n >= budget then break end
      end
    end
  end
end
for _, s in pairs(touched) do finish(s) end
return n
"""
)

# KEYS: a subject's rows and exp sets. ARGV: the last rank of rows to read, the
# lowest valid_to to read ('(' .. now; '-inf' for every one). The read of a
# subject whose facts with an end may still be valid (its marker says so), or of
# a page past the first: its newest rows (marker first) and its rows that end
# after now.
SUBJECT_READ = """
return {redis.call('ZREVRANGE', KEYS[1], 0, ARGV[1]),
        redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[2], '+inf')}
"""

# KEYS[1]: the layout key. ARGV[1]: this code's layout. Records it unless a
# newer one is there; returns what was there before ('' for none).
SET_LAYOUT = """
local found = redis.call('GET', KEYS[1])
if not found or (tonumber(found) or 0) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return found or ''
"""

# -- read and upkeep scripts (not prefixed with LIBRARY) ---------------------

# Reads the newest active facts of one sorted index in a single round trip,
# skipping entries whose hash is gone or superseded (left by another writer),
# so ``limit=n`` returns n facts whenever n exist. The reply is one JSON array
# of rows, parsed in one call; ``[id]`` stands for a fact with no row (an
# older writer's), to read field by field. ARGV[3] live facts are skipped first
# (``offset``); ARGV[4] is the moment facts must be valid at ('' for any).
READ_NEWEST = """
local limit, skip, now = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local function valid(from, to)
  if not now then return true end
  return (not from or from == '' or tonumber(from) <= now) and
         (not to or to == '' or tonumber(to) > now)
end
local out = {}
local start = 0
local batch = 1000
if limit > 0 and limit < batch then batch = limit end
while limit < 0 or #out < limit do
  local ids = redis.call('ZREVRANGE', KEYS[1], start, start + batch - 1)
  if #ids == 0 then break end
  for _, member in ipairs(ids) do
    local id = string.format('%d', tonumber(member))
    local h = redis.call('HMGET', ARGV[1] .. id, 'row', 'superseded_by', 'scope', 'valid_from',
                         'valid_to')
    if h[3] and (not h[2] or h[2] == '') and valid(h[4], h[5]) then
      if skip > 0 then
        skip = skip - 1
      else
        out[#out + 1] = h[1] or ('[' .. id .. ']')
        if #out == limit then break end
      end
    end
  end
  start = start + batch
end
return '[' .. table.concat(out, ',') .. ']'
"""

# Drops the rows of one subject that no longer match an active fact hash (its
# marker, "~..." scored +inf, is the scripts' own and is left alone)
# (superseded, deleted or rewritten by another writer), and the active-index
# entries of facts that are gone or superseded. Checks at most ARGV[3] rows
# from rank ARGV[2] per call, so a huge subject never blocks the server long;
# returns the rank to go on from, or -1 when done.
# KEYS: rows, active index, scope index; ARGV[1]: the fact key prefix.
PRUNE_ROWS = """
local start, count = tonumber(ARGV[2]), tonumber(ARGV[3])
local entries = redis.call('ZRANGE', KEYS[1], start, start + count - 1)
local kept = 0
for _, entry in ipairs(entries) do
  local member = string.sub(entry, 1, 20)
  local h = {}
  if string.sub(entry, 1, 1) ~= '~' then
    h = redis.call('HMGET', ARGV[1] .. string.format('%d', tonumber(member)),
                   'superseded_by', 'scope', 'row')
  end
  local live = h[2] and (not h[1] or h[1] == '')
  if string.sub(entry, 1, 1) == '~' then
    kept = kept + 1
  else
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
end
if #entries < count then return -1 end
return start + kept
"""

# Raises the id counter to at least ARGV[1] (after indexing older facts).
RAISE_SEQ = """
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if cur < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
return 1
"""
