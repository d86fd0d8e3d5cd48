--! read
-- The thread's ledger hash, each checkpoint's seq and header line (its scalar fields: the
-- payload texts after the line never leave the server) and its two outbox state hashes.
local heads = {}
local all = redis.call('HGETALL', C)
for j = 1, #all, 2 do
  local doc = all[j + 1]
  local cut = string.find(doc, '\n', 1, true)
  table.insert(heads, all[j])
  table.insert(heads, string.sub(doc, 1, cut - 1))
end
return {redis.call('HGETALL', M), heads, redis.call('HGETALL', OS), redis.call('HGETALL', SY)}
