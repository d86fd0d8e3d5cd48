--! read
local seq = redis.call('HGET', M, 'last')
if not seq then return false end
local doc = redis.call('HGET', C, seq)
if not doc then return false end
return {seq, doc}
