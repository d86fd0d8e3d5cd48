--! write
-- ARGV[4]: thread id; ARGV[5]: holder; ARGV[6]: run id; ARGV[7]: now (us); ARGV[8]: expiry.
local cur = redis.call('HMGET', M, 'lh', 'lr', 'la', 'le')
if cur[1] and cur[1] ~= ARGV[5] and tonumber(cur[4]) > tonumber(ARGV[7]) then
  return {'held', cur[1], cur[2] or '', cur[3] or '', cur[4]}
end
redis.call('HSET', M, 'id', ARGV[4], 'lh', ARGV[5], 'lr', ARGV[6], 'la', ARGV[7], 'le', ARGV[8])
apply_ttl()
return {'ok'}
