--! write
-- ARGV[4]: holder.
if redis.call('HGET', M, 'lh') ~= ARGV[4] then return 'not_held' end
redis.call('HDEL', M, 'lh', 'lr', 'la', 'le')
apply_ttl()
return 'ok'
