--! write
-- ARGV[4]: thread id; then field/value pairs to set and, after a '--' marker, fields to drop.
local i = 5
local fields = {}
while ARGV[i] and ARGV[i] ~= '--' do
  table.insert(fields, ARGV[i])
  table.insert(fields, ARGV[i + 1])
  i = i + 2
end
if ARGV[i] == '--' then
  for j = i + 1, #ARGV do redis.call('HDEL', M, ARGV[j]) end
end
redis.call('HSET', M, 'id', ARGV[4], unpack(fields))
apply_ttl()
return 'ok'
