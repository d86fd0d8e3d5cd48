--! keys
-- ARGV[4..]: seqs to release from quarantine. Returns seq/header pairs released.
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
