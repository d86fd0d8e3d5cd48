--! write
-- ARGV[4]: holder; ARGV[5]: new expiry (us).
local cur = redis.call('HMGET', M, 'lh', 'lr', 'la', 'le')
if cur[1] ~= ARGV[4] then
  if cur[1] then return {'lost', cur[1], cur[2] or '', cur[3] or '', cur[4]} end
  return {'lost'}
end
redis.call('HSET', M, 'le', ARGV[5])
apply_ttl()
return {'ok', cur[2] or '', cur[3] or ''}
