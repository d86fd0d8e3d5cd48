-- KEYS[1]: the reconcile lock; ARGV[1]: the holder's token. Deletes it only if still theirs.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
