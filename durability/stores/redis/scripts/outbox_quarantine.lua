--! keys
-- ARGV[4]: now (us); then seq/reason pairs. Returns seq/header pairs of the rows quarantined.
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
