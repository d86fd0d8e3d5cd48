--! keys
-- ARGV[4..]: seqs of outbox state records the doctor found without their row. Drops a synced
-- record whose checkpoint is gone, and a pending or quarantined record whose document is gone,
-- each checked here (a row written, sent or deleted since the doctor read is left as it is).
-- Returns the number of records dropped, then the seqs whose pending record went (the client
-- drops their index entries).
local dropped, unindex = 0, {}
for j = 4, #ARGV do
  local seq = ARGV[j]
  if redis.call('HEXISTS', SY, 'h' .. seq) == 1 and redis.call('HEXISTS', C, seq) == 0 then
    redis.call('HDEL', SY, 'h' .. seq, 'a' .. seq, 'e' .. seq, 'r' .. seq, 'z' .. seq)
    dropped = dropped + 1
  end
  if redis.call('HEXISTS', OS, 'h' .. seq) == 1 and redis.call('HEXISTS', OD, seq) == 0 then
    redis.call('HDEL', OS, 'h' .. seq, 'a' .. seq, 'e' .. seq, 'q' .. seq, 'z' .. seq, 'r' .. seq)
    dropped = dropped + 1
    table.insert(unindex, seq)
  end
end
if #unindex > 0 and redis.call('HLEN', OS) <= 1 and redis.call('HLEN', OD) == 0 then
  redis.call('DEL', OS)
end
local out = {dropped}
for _, seq in ipairs(unindex) do table.insert(out, seq) end
return out
