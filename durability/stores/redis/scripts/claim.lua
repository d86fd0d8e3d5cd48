--! write
-- ARGV[4]: claim token (the same on a retry). Exactly one claimer gets the document.
local doc = redis.call('HGET', P, 'doc')
if not doc then return false end
local claimed = redis.call('HGET', P, 'claimed')
if claimed then
  if claimed == ARGV[4] then return doc end
  return false
end
redis.call('HSET', P, 'claimed', ARGV[4])
apply_ttl()
return doc
