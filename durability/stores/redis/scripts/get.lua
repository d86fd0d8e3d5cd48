--! read
-- ARGV[1]: namespace; ARGV[2]: checkpoint id.
local seq = redis.call('HGET', I, ARGV[1] .. '\0' .. ARGV[2])
if not seq then return false end
return {seq, redis.call('HGET', C, seq)}
