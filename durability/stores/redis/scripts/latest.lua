--! read
-- ARGV[1]: namespace. The latest checkpoint of the namespace: its seq and document.
local hit = redis.call('ZREVRANGEBYLEX', X, '(' .. ARGV[1] .. '\0:', '[' .. ARGV[1] .. '\0', 'LIMIT', 0, 1)[1]
if not hit then return false end
local seq = string.format('%d', tonumber(string.sub(hit, #ARGV[1] + 2)))
return {seq, redis.call('HGET', C, seq)}
