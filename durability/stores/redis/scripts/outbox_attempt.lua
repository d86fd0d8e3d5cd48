--! keys
-- ARGV[4]: "1" when ARGV[5] is an error to record, "0" to clear it; ARGV[6..]: seqs.
for j = 6, #ARGV do
  local seq = ARGV[j]
  for _, key in ipairs({OS, SY}) do
    if redis.call('HEXISTS', key, 'h' .. seq) == 1 then
      redis.call('HINCRBY', key, 'a' .. seq, 1)
      if ARGV[4] == '1' then
        redis.call('HSET', key, 'e' .. seq, ARGV[5])
      else
        redis.call('HDEL', key, 'e' .. seq)
      end
    end
  end
end
return 'ok'
