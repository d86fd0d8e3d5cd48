--! write
-- ARGV[4]: seq; ARGV[5]: the document read; ARGV[6]: the new document; ARGV[7]: size change.
-- Replaces a checkpoint's document if nobody changed it since it was read (0 otherwise).
local seq = ARGV[4]
if redis.call('HGET', C, seq) ~= ARGV[5] then return 0 end
redis.call('HSET', C, seq, ARGV[6])
if redis.call('HEXISTS', OD, seq) == 1 then redis.call('HSET', OD, seq, ARGV[6]) end
redis.call('HINCRBY', M, 'size', ARGV[7])
for _, key in ipairs({OS, SY}) do
  local header = redis.call('HGET', key, 'h' .. seq)
  if header then
    local size = tonumber(string.match(header, ',"b":(%-?%d+),')) + tonumber(ARGV[7])
    local fresh = string.gsub(header, ',"b":%-?%d+,', ',"b":' .. string.format('%d', size) .. ',', 1)
    redis.call('HSET', key, 'h' .. seq, fresh)
  end
end
apply_ttl()
return 1
