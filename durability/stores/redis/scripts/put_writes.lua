--! write
-- ARGV[4]: thread id; ARGV[5]: count; then 5 per write: namespace, checkpoint id, task id,
-- idx, document (a tombstoned thread answers 'erased'). A regular write keeps the first value; a special channel (idx < 0) overwrites.
if redis.call('EXISTS', E) == 1 then return 'erased' end
local n = tonumber(ARGV[5])
redis.call('HSET', M, 'id', ARGV[4])
for r = 0, n - 1 do
  local o = 5 + r * 5
  local prefix = ARGV[o + 1] .. '\0' .. ARGV[o + 2] .. '\0'
  local field = prefix .. ARGV[o + 3] .. '\0' .. ARGV[o + 4]
  local fresh = redis.call('HEXISTS', W, field) == 0
  if fresh then
    local order = redis.call('HINCRBY', M, 'wseq', 1)
    redis.call('ZADD', WX, 0, prefix .. string.format('%020d', order) .. '\0' .. ARGV[o + 3] .. '\0' .. ARGV[o + 4])
  end
  if fresh or tonumber(ARGV[o + 4]) < 0 then
    redis.call('HSET', W, field, ARGV[o + 5])
  end
end
apply_ttl()
return 'ok'
