--! write
-- ARGV[4]: "1" to write the rows as already synced; ARGV[5]: thread id; ARGV[6]: row count.
-- A tombstoned thread (its E key) refuses the put: {'erased'}.
-- On a single server KEYS[14] and KEYS[15] are the thread and outbox indexes: the script
-- indexes the rows itself, after the thread's keys, in the same atomic step. (On a cluster
-- they live in another slot; the client indexes the rows after the script instead.)
if redis.call('EXISTS', E) == 1 then return {'erased'} end
local n = tonumber(ARGV[6])
local existing, bad = check_rows(6, n)
if bad then return {'conflict', bad} end
redis.call('HSET', M, 'id', ARGV[5])
local t = write_time()
local out = {'ok', t}
write_rows(6, n, existing, ARGV[4] == '1', t, out)
apply_ttl()
if KEYS[14] then
  local tag = string.match(M, '{(%x+)}')
  redis.call('ZADD', KEYS[14], 0, tag)
  if ARGV[4] ~= '1' then
    for j = 3, #out do
      redis.call('ZADD', KEYS[15], t, tag .. ':' .. string.format('%020d', tonumber(out[j])))
    end
  end
end
return out
