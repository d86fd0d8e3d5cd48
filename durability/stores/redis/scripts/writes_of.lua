--! read
-- ARGV: namespace / checkpoint id pairs. For each: the count of its writes, then their documents.
local out = {}
for j = 1, #ARGV, 2 do
  local prefix = ARGV[j] .. '\0' .. ARGV[j + 1] .. '\0'
  local fields = {}
  for _, member in ipairs(redis.call('ZRANGEBYLEX', WX, '[' .. prefix, '(' .. prefix .. ':')) do
    table.insert(fields, prefix .. string.sub(member, #prefix + 22))
  end
  table.insert(out, #fields)
  if #fields > 0 then
    for _, doc in ipairs(redis.call('HMGET', W, unpack(fields))) do table.insert(out, doc) end
  end
end
return out
