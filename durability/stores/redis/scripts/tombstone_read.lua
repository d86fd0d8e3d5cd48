--! read
-- The thread's tombstone: keyed hash, erased_at (us), erased_by, receipt (all nil: none).
return redis.call('HMGET', E, 'h', 'at', 'by', 'r')
