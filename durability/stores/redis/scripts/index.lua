-- KEYS: the cross-slot indexes (threads, finished, parks, outbox, quarantine), one slot.
-- ARGV: a list of operations, '-' index member (remove) or '+' index member score (add),
-- applied in order.
local i = 1
while i <= #ARGV do
  local key = KEYS[tonumber(ARGV[i + 1])]
  if ARGV[i] == '+' then
    redis.call('ZADD', key, ARGV[i + 3], ARGV[i + 2])
    i = i + 4
  else
    redis.call('ZREM', key, ARGV[i + 2])
    i = i + 3
  end
end
return 'ok'
