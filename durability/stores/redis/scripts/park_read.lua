--! read
return redis.call('HMGET', P, 'doc', 'claimed')
