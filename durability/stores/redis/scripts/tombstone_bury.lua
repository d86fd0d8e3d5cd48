--! keys
-- Tombstone the thread (its E key never expires): ARGV[1] keyed hash, ARGV[2] erased_at (us),
-- ARGV[3] erased_by, ARGV[4] receipt. A tombstone already there is kept. Returns the stored one.
if redis.call('EXISTS', E) == 0 then
  redis.call('HSET', E, 'h', ARGV[1], 'at', ARGV[2], 'by', ARGV[3], 'r', ARGV[4])
end
return redis.call('HMGET', E, 'h', 'at', 'by', 'r')
