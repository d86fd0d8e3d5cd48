--! read
-- What the cross-slot indexes should hold for the thread (reconcile and repair).
local ledger = redis.call('HMGET', M, 'id', 'fa', 'da')
local park = redis.call('HMGET', P, 'dl', 'claimed')
local pending = {}
local status = redis.call('HGETALL', OS)
for j = 1, #status, 2 do
  local f = status[j]
  if string.sub(f, 1, 1) == 'h' then
    local seq = string.sub(f, 2)
    table.insert(pending, seq)
    table.insert(pending, status[j + 1])
    table.insert(pending, redis.call('HEXISTS', OS, 'q' .. seq))
  end
end
return {redis.call('EXISTS', M), ledger[2] or false, ledger[3] or false, park[1] or false, park[2] or false, pending}
