--! read
-- ARGV[1..]: "namespace\0checkpoint id" keys. Returns the index of the first one stored, or -1.
for j = 1, #ARGV do
  if redis.call('HEXISTS', I, ARGV[j]) == 1 then return j - 1 end
end
return -1
