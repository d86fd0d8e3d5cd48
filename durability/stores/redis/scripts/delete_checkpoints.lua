--! write
-- ARGV[4..]: namespace / checkpoint id pairs. Removes those checkpoints and their writes;
-- returns removed checkpoints, removed writes, then the seqs of outbox rows removed.
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
