--! read
-- ARGV: "namespace \0 checkpoint id" keys. Their seq/document pairs (absent ones skipped).
local out = {}
if #ARGV == 0 then return out end
local seqs = redis.call('HMGET', I, unpack(ARGV))
for j = 1, #ARGV do
  if seqs[j] then
    table.insert(out, seqs[j])
    table.insert(out, redis.call('HGET', C, seqs[j]))
  end
end
return out
