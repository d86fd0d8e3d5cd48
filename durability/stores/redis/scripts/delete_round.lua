--! keys
-- One delete round: removes up to ARGV[4] checkpoints and as many pending writes, oldest
-- first; when nothing is left it removes the thread's remaining keys. Returns removed
-- checkpoints, removed writes, checkpoints left, writes left, 1 when the thread is gone, then
-- the seqs of outbox rows it removed.
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
