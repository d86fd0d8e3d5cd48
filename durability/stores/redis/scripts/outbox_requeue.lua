--! keys
-- ARGV[4]: now (us); ARGV[5..]: seqs of rows marked synced that the plane lacks (the doctor).
-- Each row still held and still marked synced becomes pending again from now ('r' field): its
-- document is copied back from the checkpoint, its synced record moves to the outbox state.
-- Returns seq/header pairs of the rows re-queued (the client indexes them).
local out = {}
for j = 5, #ARGV do
  local seq = ARGV[j]
  local header = redis.call('HGET', SY, 'h' .. seq)
  local doc = redis.call('HGET', C, seq)
  if header and doc then
    redis.call('HSET', OD, seq, doc)
    redis.call('HSET', OS, 'h' .. seq, header, 'r' .. seq, ARGV[4])
    local floor = redis.call('HGET', OS, 'n')
    if not floor or tonumber(floor) < tonumber(seq) then redis.call('HSET', OS, 'n', seq) end
    redis.call('HDEL', SY, 'h' .. seq, 'a' .. seq, 'e' .. seq, 'r' .. seq, 'z' .. seq)
    table.insert(out, seq)
    table.insert(out, header)
  end
end
-- Pending rows wait for the plane while the store replicates; else they keep the thread's
-- expiry (bookkeeping never moves it).
if #out > 0 then
  if ARGV[2] == '1' then
    redis.call('PERSIST', OD)
    redis.call('PERSIST', OS)
  else
    local at = redis.call('PEXPIRETIME', M)
    if at > 0 then
      redis.call('PEXPIREAT', OD, at)
      redis.call('PEXPIREAT', OS, at)
    end
  end
end
return out
