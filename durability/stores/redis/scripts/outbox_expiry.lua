--! keys
-- The outbox keys' expiry as ARGV[2] (does the store replicate) calls for, set when a connect
-- or a forget changes the answer. Replicating: none. Not: the thread's own, never extended;
-- when the thread already expired its rows go now (returns 1: drop their index entries).
if ARGV[2] == '1' then
  redis.call('PERSIST', OD)
  redis.call('PERSIST', OS)
  return 0
end
local at = redis.call('PEXPIRETIME', M)
if at > 0 then
  redis.call('PEXPIREAT', OD, at)
  redis.call('PEXPIREAT', OS, at)
  return 0
end
if at == -2 then
  redis.call('DEL', OD, OS)
  return 1
end
return 0
