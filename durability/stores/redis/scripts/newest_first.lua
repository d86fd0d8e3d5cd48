--! read
-- ARGV[1]: namespace; ARGV[2]: before ('' for none); ARGV[3]: limit (-1: all). The
-- namespace's checkpoints by id, greatest first (byte order of UTF-8 is code point order).
local high = '(' .. ARGV[1] .. '\1'
if ARGV[2] ~= '' then high = '(' .. ARGV[1] .. '\0' .. ARGV[2] end
local keys = redis.call('ZREVRANGEBYLEX', IX, high, '[' .. ARGV[1] .. '\0', 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
if #keys == 0 then return out end
local seqs = redis.call('HMGET', I, unpack(keys))
for j = 1, #keys do
  if seqs[j] then
    table.insert(out, seqs[j])
    table.insert(out, redis.call('HGET', C, seqs[j]))
  end
end
return out
