--! keys
-- ARGV[4]: now (us); ARGV[5..]: seqs to release from quarantine. Each released row is pending
-- again from now ('r' field). Returns, per row released: seq, header, quarantined at, and when
-- it had become pending before ('' for: when it was written).
local out = {}
for j = 5, #ARGV do
  local seq = ARGV[j]
  if redis.call('HEXISTS', OS, 'q' .. seq) == 1 then
    local until_at = redis.call('HGET', OS, 'z' .. seq) or ''
    local since = redis.call('HGET', OS, 'r' .. seq) or ''
    redis.call('HDEL', OS, 'q' .. seq, 'z' .. seq)
    redis.call('HSET', OS, 'r' .. seq, ARGV[4])
    table.insert(out, seq)
    table.insert(out, redis.call('HGET', OS, 'h' .. seq))
    table.insert(out, until_at)
    table.insert(out, since)
  end
end
return out
