--! read
-- Every "namespace \0 checkpoint id" of the thread (ids only).
return redis.call('ZRANGE', IX, 0, -1)
