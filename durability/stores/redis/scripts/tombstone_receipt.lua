--! keys
-- Replace the tombstone's receipt (ARGV[1]); nothing without a tombstone.
if redis.call('EXISTS', E) == 1 then redis.call('HSET', E, 'r', ARGV[1]) end
return 1
