--! read
-- ARGV[1]: "1" for one namespace (ARGV[2]); ARGV[3]: after seq ("" for none); ARGV[4]: limit
-- ("-1" for none). Returns seq/document pairs in seq order.
local limit = tonumber(ARGV[4])
local seqs = {}
if ARGV[1] == '1' then
  local low = '[' .. ARGV[2] .. '\0'
  if ARGV[3] ~= '' then low = '(' .. ARGV[2] .. '\0' .. string.format('%020d', tonumber(ARGV[3])) end
  for _, member in ipairs(redis.call('ZRANGEBYLEX', X, low, '(' .. ARGV[2] .. '\0:', 'LIMIT', 0, limit)) do
    table.insert(seqs, string.format('%d', tonumber(string.sub(member, #ARGV[2] + 2))))
  end
else
  local low = '-inf'
  if ARGV[3] ~= '' then low = '(' .. ARGV[3] end
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', S, low, '+inf', 'LIMIT', 0, limit)) do
    table.insert(seqs, string.format('%d', tonumber(string.sub(member, 1, 20))))
  end
end
local out = {}
if #seqs == 0 then return out end
local docs = redis.call('HMGET', C, unpack(seqs))
for j, seq in ipairs(seqs) do
  if docs[j] then
    table.insert(out, seq)
    table.insert(out, docs[j])
  end
end
return out
