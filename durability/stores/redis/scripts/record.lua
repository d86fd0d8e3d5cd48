--! read
-- The thread's ledger hash and checkpoint count.
return {redis.call('HGETALL', M), redis.call('HLEN', C)}
