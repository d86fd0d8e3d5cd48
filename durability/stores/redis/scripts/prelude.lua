-- Shared by the write scripts. ARGV[1]: the platform's waiting retention in ms; ARGV[2]: "1"
-- when the store replicates (the outbox keys then outlive the thread); ARGV[3]: "1" on a retry.
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
