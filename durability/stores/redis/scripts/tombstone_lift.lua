--! keys
-- Reopen the thread: remove its tombstone. Returns 1 if there was one.
return redis.call('DEL', E)
