--! read
-- ARGV[1]: namespace; ARGV[2]: checkpoint id. The pending writes in write order.
local prefix = ARGV[1] .. '\0' .. ARGV[2] .. '\0'
local fields = {}
for _, member in ipairs(redis.call('ZRANGEBYLEX', WX, '[' .. prefix, '(' .. prefix .. ':')) do
  table.insert(fields, prefix .. string.sub(member, #prefix + 22))
end
if #fields == 0 then return {} end
return redis.call('HMGET', W, unpack(fields))
