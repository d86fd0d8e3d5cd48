--! write
-- Take a finished thread out of the finished set; a thread the store does not hold stays absent.
if redis.call('EXISTS', M) == 0 then return 'absent' end
redis.call('HDEL', M, 'fa', 'da')
apply_ttl()
return 'ok'
