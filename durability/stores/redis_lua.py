"""The Lua scripts of the Redis store (see :mod:`durability.stores.redis` for the key layout).

Every write script runs over the keys of ONE thread, which all share one hash tag and so one
cluster slot: it is atomic, and it ends by re-applying the thread's waiting retention as the
absolute expiry of every key the thread has (:data:`PRELUDE`'s ``apply_ttl``). Read scripts are
flagged ``no-writes`` and never touch an expiry.

Numbers that do not fit a Lua double exactly are never computed here: times travel as decimal
strings of microseconds, written with ``%.0f`` (exact below 2**53, i.e. until the year 2255).
"""

from __future__ import annotations

#: The thread's keys, in the order every script receives them.
THREAD_KEYS = ("m", "c", "i", "s", "x", "w", "wx", "p", "sy", "od", "os", "ix")

_KEYS = """
local M, C, I, S, X, W, WX, P, SY, OD, OS, IX =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12]
"""

#: Shared by the write scripts. ARGV[1]: the platform's waiting retention in ms; ARGV[2]: "1"
#: when the store replicates (the outbox keys then outlive the thread); ARGV[3]: "1" on a retry.
PRELUDE = (
    _KEYS
    + r"""
local function server_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The thread's waiting retention (declared in its ledger, else the platform's) becomes the
-- absolute expiry of all of its keys: one instant for all, so the thread expires whole.
local function apply_ttl()
  local declared = redis.call('HGET', M, 'dw')
  local ttl_ms = tonumber(ARGV[1])
  if declared then ttl_ms = math.floor(tonumber(declared) / 1000) end
  local at = math.floor(server_us() / 1000) + ttl_ms
  for _, key in ipairs({M, C, I, S, X, W, WX, P, SY, IX}) do
    redis.call('PEXPIREAT', key, at)
  end
  if ARGV[2] == '1' then
    redis.call('PERSIST', OD)
    redis.call('PERSIST', OS)
  else
    redis.call('PEXPIREAT', OD, at)
    redis.call('PEXPIREAT', OS, at)
  end
end

local function next_seq()
  if redis.call('HEXISTS', M, 'seq') == 0 then
    -- Pending outbox rows of an expired incarnation keep their seqs: never reuse them.
    local floor = redis.call('HGET', OS, 'n')
    if floor then redis.call('HSET', M, 'seq', floor) end
  end
  return redis.call('HINCRBY', M, 'seq', 1)
end

-- A write time per thread that never goes backwards (the outbox's oldest-first order).
local function write_time()
  local now = server_us()
  local last = redis.call('HGET', M, 'lt')
  if last and tonumber(last) > now then now = tonumber(last) end
  local t = string.format('%.0f', now)
  redis.call('HSET', M, 'lt', t)
  return t
end

-- Rows are 6 arguments each from ARGV[base + 1]: namespace, checkpoint id, document, size,
-- created_at (us), outbox header. Returns a table of already-stored seqs (a retried write
-- whose first attempt landed), or the index of the first conflicting row.
local function check_rows(base, n)
  local seen, existing = {}, {}
  for r = 0, n - 1 do
    local o = base + r * 6
    local key = ARGV[o + 1] .. '\0' .. ARGV[o + 2]
    if seen[key] then return nil, r end
    seen[key] = true
    local seq = redis.call('HGET', I, key)
    if seq then
      if ARGV[3] == '1' and redis.call('HGET', C, seq) == ARGV[o + 3] then
        existing[r] = seq
      else
        return nil, r
      end
    end
  end
  return existing, nil
end

local function write_rows(base, n, existing, synced, t, out)
  for r = 0, n - 1 do
    local o = base + r * 6
    local seq = existing[r]
    if not seq then
      local ns, cid, doc = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3]
      local s = next_seq()
      seq = string.format('%d', s)
      local seq20 = string.format('%020d', s)
      redis.call('HSET', C, seq, doc)
      redis.call('HSET', I, ns .. '\0' .. cid, seq)
      redis.call('ZADD', IX, 0, ns .. '\0' .. cid)
      redis.call('ZADD', S, s, seq20 .. '\0' .. ns .. '\0' .. cid)
      redis.call('ZADD', X, 0, ns .. '\0' .. seq20)
      redis.call('HSET', M, 'last', seq)
      redis.call('HINCRBY', M, 'size', ARGV[o + 4])
      local newest = redis.call('HGET', M, 'na')
      if not newest or tonumber(ARGV[o + 5]) > tonumber(newest) then
        redis.call('HSET', M, 'na', ARGV[o + 5])
      end
      local header = '{"t":"' .. t .. '",' .. string.sub(ARGV[o + 6], 2)
      if synced then
        redis.call('HSET', SY, 'h' .. seq, header)
      else
        redis.call('HSET', OD, seq, doc)
        redis.call('HSET', OS, 'h' .. seq, header, 'n', seq)
      end
    end
    table.insert(out, seq)
  end
end
"""
)

#: ARGV[4]: "1" to write the rows as already synced; ARGV[5]: thread id; ARGV[6]: row count.
#: On a single server KEYS[13] and KEYS[14] are the thread and outbox indexes: the script
#: indexes the rows itself, after the thread's keys, in the same atomic step. (On a cluster
#: they live in another slot; the client indexes the rows after the script instead.)
PUT = (
    PRELUDE
    + r"""
local n = tonumber(ARGV[6])
local existing, bad = check_rows(6, n)
if bad then return {'conflict', bad} end
redis.call('HSET', M, 'id', ARGV[5])
local t = write_time()
local out = {'ok', t}
write_rows(6, n, existing, ARGV[4] == '1', t, out)
apply_ttl()
if KEYS[13] then
  local tag = string.match(M, '{(%x+)}')
  redis.call('ZADD', KEYS[13], 0, tag)
  if ARGV[4] ~= '1' then
    for j = 3, #out do
      redis.call('ZADD', KEYS[14], t, tag .. ':' .. string.format('%020d', tonumber(out[j])))
    end
  end
end
return out
"""
)

#: ARGV[4]: synced; ARGV[5]: thread id; ARGV[6]: park document; ARGV[7]: deadline (us);
#: ARGV[8..13]: the interrupted checkpoint's row.
PARK = (
    PRELUDE
    + r"""
local current = redis.call('HGET', P, 'doc')
local claimed = redis.call('HGET', P, 'claimed')
if current and not claimed and not (ARGV[3] == '1' and current == ARGV[6]) then
  return {'park_exists'}
end
local existing, bad = check_rows(7, 1)
if bad then return {'conflict', bad} end
redis.call('HSET', M, 'id', ARGV[5])
local t = write_time()
local out = {'ok', t}
write_rows(7, 1, existing, ARGV[4] == '1', t, out)
redis.call('DEL', P)
redis.call('HSET', P, 'doc', ARGV[6], 'dl', ARGV[7])
apply_ttl()
return out
"""
)

#: ARGV[4]: claim token (the same on a retry). Exactly one claimer gets the document.
CLAIM = (
    PRELUDE
    + r"""
local doc = redis.call('HGET', P, 'doc')
if not doc then return false end
local claimed = redis.call('HGET', P, 'claimed')
if claimed then
  if claimed == ARGV[4] then return doc end
  return false
end
redis.call('HSET', P, 'claimed', ARGV[4])
apply_ttl()
return doc
"""
)

#: ARGV[4]: thread id; ARGV[5]: count; then 5 per write: namespace, checkpoint id, task id,
#: idx, document. A regular write keeps the first value; a special channel (idx < 0) overwrites.
PUT_WRITES = (
    PRELUDE
    + r"""
local n = tonumber(ARGV[5])
redis.call('HSET', M, 'id', ARGV[4])
for r = 0, n - 1 do
  local o = 5 + r * 5
  local prefix = ARGV[o + 1] .. '\0' .. ARGV[o + 2] .. '\0'
  local field = prefix .. ARGV[o + 3] .. '\0' .. ARGV[o + 4]
  local fresh = redis.call('HEXISTS', W, field) == 0
  if fresh then
    local order = redis.call('HINCRBY', M, 'wseq', 1)
    redis.call('ZADD', WX, 0, prefix .. string.format('%020d', order) .. '\0' .. ARGV[o + 3] .. '\0' .. ARGV[o + 4])
  end
  if fresh or tonumber(ARGV[o + 4]) < 0 then
    redis.call('HSET', W, field, ARGV[o + 5])
  end
end
apply_ttl()
return 'ok'
"""
)

#: ARGV[4]: thread id; then field/value pairs to set and, after a '--' marker, fields to drop.
LEDGER = (
    PRELUDE
    + r"""
local i = 5
local fields = {}
while ARGV[i] and ARGV[i] ~= '--' do
  table.insert(fields, ARGV[i])
  table.insert(fields, ARGV[i + 1])
  i = i + 2
end
if ARGV[i] == '--' then
  for j = i + 1, #ARGV do redis.call('HDEL', M, ARGV[j]) end
end
redis.call('HSET', M, 'id', ARGV[4], unpack(fields))
apply_ttl()
return 'ok'
"""
)

#: Take a finished thread out of the finished set; a thread the store does not hold stays absent.
UNMARK = (
    PRELUDE
    + r"""
if redis.call('EXISTS', M) == 0 then return 'absent' end
redis.call('HDEL', M, 'fa', 'da')
apply_ttl()
return 'ok'
"""
)

#: ARGV[4]: thread id; ARGV[5]: holder; ARGV[6]: run id; ARGV[7]: now (us); ARGV[8]: expiry.
LEASE_ACQUIRE = (
    PRELUDE
    + r"""
local cur = redis.call('HMGET', M, 'lh', 'lr', 'la', 'le')
if cur[1] and cur[1] ~= ARGV[5] and tonumber(cur[4]) > tonumber(ARGV[7]) then
  return {'held', cur[1], cur[2] or '', cur[3] or '', cur[4]}
end
redis.call('HSET', M, 'id', ARGV[4], 'lh', ARGV[5], 'lr', ARGV[6], 'la', ARGV[7], 'le', ARGV[8])
apply_ttl()
return {'ok'}
"""
)

#: ARGV[4]: holder; ARGV[5]: new expiry (us).
LEASE_RENEW = (
    PRELUDE
    + r"""
local cur = redis.call('HMGET', M, 'lh', 'lr', 'la', 'le')
if cur[1] ~= ARGV[4] then
  if cur[1] then return {'lost', cur[1], cur[2] or '', cur[3] or '', cur[4]} end
  return {'lost'}
end
redis.call('HSET', M, 'le', ARGV[5])
apply_ttl()
return {'ok', cur[2] or '', cur[3] or ''}
"""
)

#: ARGV[4]: holder.
LEASE_RELEASE = (
    PRELUDE
    + r"""
if redis.call('HGET', M, 'lh') ~= ARGV[4] then return 'not_held' end
redis.call('HDEL', M, 'lh', 'lr', 'la', 'le')
apply_ttl()
return 'ok'
"""
)

#: One delete round: removes up to ARGV[4] checkpoints and as many pending writes, oldest
#: first; when nothing is left it removes the thread's remaining keys. Returns removed
#: checkpoints, removed writes, checkpoints left, writes left, 1 when the thread is gone, then
#: the seqs of outbox rows it removed.
DELETE_ROUND = (
    _KEYS
    + r"""
local batch = tonumber(ARGV[4])
local removed_cp, removed_w, gone = 0, 0, {}
for _, member in ipairs(redis.call('ZRANGE', S, 0, batch - 1)) do
  local seq20 = string.sub(member, 1, 20)
  local seq = string.format('%d', tonumber(seq20))
  local cut = string.find(member, '\0', 22, true)
  local ns = string.sub(member, 22, cut - 1)
  local cid = string.sub(member, cut + 1)
  redis.call('HDEL', C, seq)
  redis.call('HDEL', I, ns .. '\0' .. cid)
  redis.call('ZREM', IX, ns .. '\0' .. cid)
  redis.call('ZREM', X, ns .. '\0' .. seq20)
  redis.call('ZREM', S, member)
  if redis.call('HDEL', OD, seq) == 1 then table.insert(gone, seq) end
  for _, f in ipairs({'h', 'a', 'e', 'q', 'z'}) do
    redis.call('HDEL', OS, f .. seq)
    redis.call('HDEL', SY, f .. seq)
  end
  removed_cp = removed_cp + 1
end
for _, member in ipairs(redis.call('ZRANGE', WX, 0, batch - 1)) do
  -- namespace \0 checkpoint \0 order(20) \0 task \0 idx  ->  namespace \0 checkpoint \0 task \0 idx
  local a = string.find(member, '\0', 1, true)
  local b = string.find(member, '\0', a + 1, true)
  redis.call('HDEL', W, string.sub(member, 1, b) .. string.sub(member, b + 22))
  redis.call('ZREM', WX, member)
  removed_w = removed_w + 1
end
local left_cp, left_w = redis.call('ZCARD', S), redis.call('ZCARD', WX)
local done = 0
if left_cp == 0 and left_w == 0 then
  for _, field in ipairs(redis.call('HKEYS', OD)) do table.insert(gone, field) end
  redis.call('UNLINK', M, C, I, S, X, W, WX, P, SY, OD, OS, IX)
  done = 1
end
local out = {removed_cp, removed_w, left_cp, left_w, done}
for _, seq in ipairs(gone) do table.insert(out, seq) end
return out
"""
)

# ---------------------------------------------------------------------------- outbox

#: ARGV[4]: now (us); ARGV[5..]: seqs. Moves pending or quarantined rows to the synced set.
#: Returns the seqs that left the outbox.
OUTBOX_SYNCED = (
    _KEYS
    + r"""
local alive = redis.call('EXISTS', M) == 1
local moved = {}
for j = 5, #ARGV do
  local seq = ARGV[j]
  local header = redis.call('HGET', OS, 'h' .. seq)
  if header then
    if alive then
      local a = redis.call('HGET', OS, 'a' .. seq)
      local e = redis.call('HGET', OS, 'e' .. seq)
      redis.call('HSET', SY, 'h' .. seq, header, 'z' .. seq, ARGV[4])
      if a then redis.call('HSET', SY, 'a' .. seq, a) end
      if e then redis.call('HSET', SY, 'e' .. seq, e) end
    end
    redis.call('HDEL', OS, 'h' .. seq, 'a' .. seq, 'e' .. seq, 'q' .. seq, 'z' .. seq)
    redis.call('HDEL', OD, seq)
    table.insert(moved, seq)
  elseif alive and redis.call('HEXISTS', SY, 'h' .. seq) == 1 then
    redis.call('HSET', SY, 'z' .. seq, ARGV[4])
  end
end
-- Bookkeeping never moves the thread's expiry: a key it creates gets the thread's.
local at = redis.call('PEXPIRETIME', M)
if at > 0 then redis.call('PEXPIREAT', SY, at) end
if redis.call('HLEN', OS) <= 1 and redis.call('HLEN', OD) == 0 then
  redis.call('DEL', OS)
end
return moved
"""
)

#: The outbox keys' expiry as ARGV[2] (does the store replicate) calls for, set when a connect
#: or a forget changes the answer. Replicating: none. Not: the thread's own, never extended;
#: when the thread already expired its rows go now (returns 1: drop their index entries).
OUTBOX_EXPIRY = (
    _KEYS
    + r"""
if ARGV[2] == '1' then
  redis.call('PERSIST', OD)
  redis.call('PERSIST', OS)
  return 0
end
local at = redis.call('PEXPIRETIME', M)
if at > 0 then
  redis.call('PEXPIREAT', OD, at)
  redis.call('PEXPIREAT', OS, at)
  return 0
end
if at == -2 then
  redis.call('DEL', OD, OS)
  return 1
end
return 0
"""
)

#: ARGV[4]: now (us); then seq/reason pairs. Returns seq/header pairs of the rows quarantined.
OUTBOX_QUARANTINE = (
    _KEYS
    + r"""
local out = {}
for j = 5, #ARGV, 2 do
  local seq = ARGV[j]
  local header = redis.call('HGET', OS, 'h' .. seq)
  if header then
    redis.call('HSET', OS, 'q' .. seq, ARGV[j + 1], 'z' .. seq, ARGV[4])
    table.insert(out, seq)
    table.insert(out, header)
  end
end
return out
"""
)

#: ARGV[4]: "1" when ARGV[5] is an error to record, "0" to clear it; ARGV[6..]: seqs.
OUTBOX_ATTEMPT = (
    _KEYS
    + r"""
for j = 6, #ARGV do
  local seq = ARGV[j]
  for _, key in ipairs({OS, SY}) do
    if redis.call('HEXISTS', key, 'h' .. seq) == 1 then
      redis.call('HINCRBY', key, 'a' .. seq, 1)
      if ARGV[4] == '1' then
        redis.call('HSET', key, 'e' .. seq, ARGV[5])
      else
        redis.call('HDEL', key, 'e' .. seq)
      end
    end
  end
end
return 'ok'
"""
)

#: ARGV[4..]: seqs to release from quarantine. Returns seq/header pairs released.
OUTBOX_RELEASE = (
    _KEYS
    + r"""
local out = {}
for j = 4, #ARGV do
  local seq = ARGV[j]
  if redis.call('HEXISTS', OS, 'q' .. seq) == 1 then
    redis.call('HDEL', OS, 'q' .. seq, 'z' .. seq)
    table.insert(out, seq)
    table.insert(out, redis.call('HGET', OS, 'h' .. seq))
  end
end
return out
"""
)

# ---------------------------------------------------------------------------- reads

_READ = "#!lua flags=no-writes\n" + _KEYS

#: ARGV[1]: namespace. The latest checkpoint of the namespace: its seq and document.
LATEST = (
    _READ
    + r"""
local hit = redis.call('ZREVRANGEBYLEX', X, '(' .. ARGV[1] .. '\0:', '[' .. ARGV[1] .. '\0', 'LIMIT', 0, 1)[1]
if not hit then return false end
local seq = string.format('%d', tonumber(string.sub(hit, #ARGV[1] + 2)))
return {seq, redis.call('HGET', C, seq)}
"""
)

LATEST_ANY = (
    _READ
    + r"""
local seq = redis.call('HGET', M, 'last')
if not seq then return false end
local doc = redis.call('HGET', C, seq)
if not doc then return false end
return {seq, doc}
"""
)

#: ARGV[1]: namespace; ARGV[2]: checkpoint id.
GET = (
    _READ
    + r"""
local seq = redis.call('HGET', I, ARGV[1] .. '\0' .. ARGV[2])
if not seq then return false end
return {seq, redis.call('HGET', C, seq)}
"""
)

#: ARGV[1]: "1" for one namespace (ARGV[2]); ARGV[3]: after seq ("" for none); ARGV[4]: limit
#: ("-1" for none). Returns seq/document pairs in seq order.
HISTORY = (
    _READ
    + r"""
local limit = tonumber(ARGV[4])
local seqs = {}
if ARGV[1] == '1' then
  local low = '[' .. ARGV[2] .. '\0'
  if ARGV[3] ~= '' then low = '(' .. ARGV[2] .. '\0' .. string.format('%020d', tonumber(ARGV[3])) end
  for _, member in ipairs(redis.call('ZRANGEBYLEX', X, low, '(' .. ARGV[2] .. '\0:', 'LIMIT', 0, limit)) do
    table.insert(seqs, string.format('%d', tonumber(string.sub(member, #ARGV[2] + 2))))
  end
else
  local low = '-inf'
  if ARGV[3] ~= '' then low = '(' .. ARGV[3] end
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', S, low, '+inf', 'LIMIT', 0, limit)) do
    table.insert(seqs, string.format('%d', tonumber(string.sub(member, 1, 20))))
  end
end
local out = {}
if #seqs == 0 then return out end
local docs = redis.call('HMGET', C, unpack(seqs))
for j, seq in ipairs(seqs) do
  if docs[j] then
    table.insert(out, seq)
    table.insert(out, docs[j])
  end
end
return out
"""
)

#: ARGV[1]: namespace; ARGV[2]: checkpoint id. The pending writes in write order.
WRITES = (
    _READ
    + r"""
local prefix = ARGV[1] .. '\0' .. ARGV[2] .. '\0'
local fields = {}
for _, member in ipairs(redis.call('ZRANGEBYLEX', WX, '[' .. prefix, '(' .. prefix .. ':')) do
  table.insert(fields, prefix .. string.sub(member, #prefix + 22))
end
if #fields == 0 then return {} end
return redis.call('HMGET', W, unpack(fields))
"""
)

#: The thread's ledger hash and checkpoint count.
RECORD = (
    _READ
    + r"""
return {redis.call('HGETALL', M), redis.call('HLEN', C)}
"""
)

#: ARGV[1..]: "namespace\0checkpoint id" keys. Returns the index of the first one stored, or -1.
ANY_STORED = (
    _READ
    + r"""
for j = 1, #ARGV do
  if redis.call('HEXISTS', I, ARGV[j]) == 1 then return j - 1 end
end
return -1
"""
)

PARK_READ = (
    _READ
    + r"""
return redis.call('HMGET', P, 'doc', 'claimed')
"""
)

#: ARGV[1..]: seqs. For each: document, header, quarantine reason, attempts, last error.
OUTBOX_READ = (
    _READ
    + r"""
local out = {}
for j = 1, #ARGV do
  local seq = ARGV[j]
  table.insert(out, redis.call('HGET', OD, seq) or false)
  local s = redis.call('HMGET', OS, 'h' .. seq, 'q' .. seq, 'a' .. seq, 'e' .. seq)
  for k = 1, 4 do table.insert(out, s[k] or false) end
end
return out
"""
)

#: Everything the outbox knows of the thread: its pending/quarantined and its synced rows.
OUTBOX_LIST = (
    _READ
    + r"""
return {redis.call('HGETALL', OS), redis.call('HGETALL', SY), redis.call('HGET', M, 'id') or false}
"""
)

#: What the cross-slot indexes should hold for the thread (reconcile and repair).
INDEX_STATE = (
    _READ
    + r"""
local ledger = redis.call('HMGET', M, 'id', 'fa', 'da')
local park = redis.call('HMGET', P, 'dl', 'claimed')
local pending = {}
local status = redis.call('HGETALL', OS)
for j = 1, #status, 2 do
  local f = status[j]
  if string.sub(f, 1, 1) == 'h' then
    local seq = string.sub(f, 2)
    table.insert(pending, seq)
    table.insert(pending, status[j + 1])
    table.insert(pending, redis.call('HEXISTS', OS, 'q' .. seq))
  end
end
return {redis.call('EXISTS', M), ledger[2] or false, ledger[3] or false, park[1] or false, park[2] or false, pending}
"""
)

#: KEYS[1]: the reconcile lock; ARGV[1]: the holder's token. Deletes it only if still theirs.
RELEASE_LOCK = r"""
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

#: ARGV[4]: seq; ARGV[5]: the document read; ARGV[6]: the new document; ARGV[7]: size change.
#: Replaces a checkpoint's document if nobody changed it since it was read (0 otherwise).
SET_DOC = (
    PRELUDE
    + r"""
local seq = ARGV[4]
if redis.call('HGET', C, seq) ~= ARGV[5] then return 0 end
redis.call('HSET', C, seq, ARGV[6])
if redis.call('HEXISTS', OD, seq) == 1 then redis.call('HSET', OD, seq, ARGV[6]) end
redis.call('HINCRBY', M, 'size', ARGV[7])
for _, key in ipairs({OS, SY}) do
  local header = redis.call('HGET', key, 'h' .. seq)
  if header then
    local size = tonumber(string.match(header, ',"b":(%-?%d+),')) + tonumber(ARGV[7])
    local fresh = string.gsub(header, ',"b":%-?%d+,', ',"b":' .. string.format('%d', size) .. ',', 1)
    redis.call('HSET', key, 'h' .. seq, fresh)
  end
end
apply_ttl()
return 1
"""
)

#: ARGV[4..]: namespace / checkpoint id pairs. Removes those checkpoints and their writes;
#: returns removed checkpoints, removed writes, then the seqs of outbox rows removed.
DELETE_CHECKPOINTS = (
    PRELUDE
    + r"""
local removed_cp, removed_w, gone = 0, 0, {}
for j = 4, #ARGV, 2 do
  local ns, cid = ARGV[j], ARGV[j + 1]
  local key = ns .. '\0' .. cid
  local seq = redis.call('HGET', I, key)
  if seq then
    local seq20 = string.format('%020d', tonumber(seq))
    for _, hk in ipairs({OS, SY}) do
      local header = redis.call('HGET', hk, 'h' .. seq)
      if header then redis.call('HINCRBY', M, 'size', -tonumber(string.match(header, ',"b":(%-?%d+),'))) end
    end
    redis.call('HDEL', C, seq)
    redis.call('HDEL', I, key)
    redis.call('ZREM', IX, key)
    redis.call('ZREM', S, seq20 .. '\0' .. key)
    redis.call('ZREM', X, ns .. '\0' .. seq20)
    if redis.call('HDEL', OD, seq) == 1 then table.insert(gone, seq) end
    for _, f in ipairs({'h', 'a', 'e', 'q', 'z'}) do
      redis.call('HDEL', OS, f .. seq)
      redis.call('HDEL', SY, f .. seq)
    end
    removed_cp = removed_cp + 1
  end
  local prefix = key .. '\0'
  for _, member in ipairs(redis.call('ZRANGEBYLEX', WX, '[' .. prefix, '(' .. prefix .. ':')) do
    redis.call('HDEL', W, prefix .. string.sub(member, #prefix + 22))
    redis.call('ZREM', WX, member)
    removed_w = removed_w + 1
  end
end
if removed_cp > 0 then
  -- The thread's totals: its newest seq and newest created_at, from what is left.
  local last = redis.call('ZREVRANGE', S, 0, 0)[1]
  if last then
    redis.call('HSET', M, 'last', string.format('%d', tonumber(string.sub(last, 1, 20))))
    local newest = nil
    for _, hk in ipairs({OS, SY}) do
      local status = redis.call('HGETALL', hk)
      for k = 1, #status, 2 do
        if string.sub(status[k], 1, 1) == 'h' then
          local at = tonumber(string.match(status[k + 1], '"at":"(%-?%d+)"'))
          if not newest or at > newest then newest = at end
        end
      end
    end
    if newest then redis.call('HSET', M, 'na', string.format('%.0f', newest)) end
  else
    redis.call('HDEL', M, 'last', 'na')
    redis.call('HSET', M, 'size', 0)
  end
end
if redis.call('EXISTS', M) == 1 then apply_ttl() end
local out = {removed_cp, removed_w}
for _, seq in ipairs(gone) do table.insert(out, seq) end
return out
"""
)

#: ARGV[1]: namespace; ARGV[2]: before ('' for none); ARGV[3]: limit (-1: all). The
#: namespace's checkpoints by id, greatest first (byte order of UTF-8 is code point order).
NEWEST_FIRST = (
    _READ
    + r"""
local high = '(' .. ARGV[1] .. '\1'
if ARGV[2] ~= '' then high = '(' .. ARGV[1] .. '\0' .. ARGV[2] end
local keys = redis.call('ZREVRANGEBYLEX', IX, high, '[' .. ARGV[1] .. '\0', 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
if #keys == 0 then return out end
local seqs = redis.call('HMGET', I, unpack(keys))
for j = 1, #keys do
  if seqs[j] then
    table.insert(out, seqs[j])
    table.insert(out, redis.call('HGET', C, seqs[j]))
  end
end
return out
"""
)

#: Every "namespace \0 checkpoint id" of the thread (ids only).
ALL_IDS = (
    _READ
    + r"""
return redis.call('ZRANGE', IX, 0, -1)
"""
)

#: ARGV: "namespace \0 checkpoint id" keys. Their seq/document pairs (absent ones skipped).
GET_MANY = (
    _READ
    + r"""
local out = {}
if #ARGV == 0 then return out end
local seqs = redis.call('HMGET', I, unpack(ARGV))
for j = 1, #ARGV do
  if seqs[j] then
    table.insert(out, seqs[j])
    table.insert(out, redis.call('HGET', C, seqs[j]))
  end
end
return out
"""
)

#: ARGV: namespace / checkpoint id pairs. For each: the count of its writes, then their documents.
WRITES_OF = (
    _READ
    + r"""
local out = {}
for j = 1, #ARGV, 2 do
  local prefix = ARGV[j] .. '\0' .. ARGV[j + 1] .. '\0'
  local fields = {}
  for _, member in ipairs(redis.call('ZRANGEBYLEX', WX, '[' .. prefix, '(' .. prefix .. ':')) do
    table.insert(fields, prefix .. string.sub(member, #prefix + 22))
  end
  table.insert(out, #fields)
  if #fields > 0 then
    for _, doc in ipairs(redis.call('HMGET', W, unpack(fields))) do table.insert(out, doc) end
  end
end
return out
"""
)

#: KEYS: the cross-slot indexes (threads, finished, parks, outbox, quarantine), one slot.
#: ARGV: a list of operations, ``-`` index member (remove) or ``+`` index member score (add),
#: applied in order.
INDEX = r"""
local i = 1
while i <= #ARGV do
  local key = KEYS[tonumber(ARGV[i + 1])]
  if ARGV[i] == '+' then
    redis.call('ZADD', key, ARGV[i + 3], ARGV[i + 2])
    i = i + 4
  else
    redis.call('ZREM', key, ARGV[i + 2])
    i = i + 3
  end
end
return 'ok'
"""

# ---- analysis reads

#: The thread's ledger hash, each checkpoint's seq and header line (its scalar fields: the
#: payload texts after the line never leave the server) and its two outbox state hashes.
ANALYSIS_THREAD = (
    _READ
    + r"""
local heads = {}
local all = redis.call('HGETALL', C)
for j = 1, #all, 2 do
  local doc = all[j + 1]
  local cut = string.find(doc, '\n', 1, true)
  table.insert(heads, all[j])
  table.insert(heads, string.sub(doc, 1, cut - 1))
end
return {redis.call('HGETALL', M), heads, redis.call('HGETALL', OS), redis.call('HGETALL', SY)}
"""
)
