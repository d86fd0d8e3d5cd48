--! keys
-- ARGV[4]: now (us); ARGV[5..]: seqs. Moves pending or quarantined rows to the synced set.
-- Returns the seqs that left the outbox.
local alive = redis.call('EXISTS', M) == 1
local moved = {}
for j = 5, #ARGV do
  local seq = ARGV[j]
  local header = redis.call('HGET', OS, 'h' .. seq)
  if header then
    if alive then
      local a = redis.call('HGET', OS, 'a' .. seq)
      local e = redis.call('HGET', OS, 'e' .. seq)
      local r = redis.call('HGET', OS, 'r' .. seq)
      redis.call('HSET', SY, 'h' .. seq, header, 'z' .. seq, ARGV[4])
      if a then redis.call('HSET', SY, 'a' .. seq, a) end
      if e then redis.call('HSET', SY, 'e' .. seq, e) end
      if r then redis.call('HSET', SY, 'r' .. seq, r) end
    end
    redis.call('HDEL', OS, 'h' .. seq, 'a' .. seq, 'e' .. seq, 'q' .. seq, 'z' .. seq, 'r' .. seq)
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
