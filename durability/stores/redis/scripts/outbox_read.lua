--! read
-- ARGV[1..]: seqs. For each: document, header, quarantine reason, attempts, last error.
local out = {}
for j = 1, #ARGV do
  local seq = ARGV[j]
  table.insert(out, redis.call('HGET', OD, seq) or false)
  local s = redis.call('HMGET', OS, 'h' .. seq, 'q' .. seq, 'a' .. seq, 'e' .. seq)
  for k = 1, 4 do table.insert(out, s[k] or false) end
end
return out
