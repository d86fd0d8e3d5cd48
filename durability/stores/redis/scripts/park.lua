--! write
-- ARGV[4]: synced; ARGV[5]: thread id; ARGV[6]: park document; ARGV[7]: deadline (us);
-- ARGV[8..13]: the interrupted checkpoint's row. A tombstoned thread answers {'erased'}.
if redis.call('EXISTS', E) == 1 then return {'erased'} end
local current = redis.call('HGET', P, 'doc')
local claimed = redis.call('HGET', P, 'claimed')
if current and not claimed and not (ARGV[3] == '1' and current == ARGV[6]) then
  return {'park_exists'}
end
local existing, bad = check_rows(7, 1)
if bad then return {'conflict', bad} end
redis.call('HSET', M, 'id', ARGV[5])
local t = write_time()
local out = {'ok', t}
write_rows(7, 1, existing, ARGV[4] == '1', t, out)
redis.call('DEL', P)
redis.call('HSET', P, 'doc', ARGV[6], 'dl', ARGV[7])
apply_ttl()
return out
