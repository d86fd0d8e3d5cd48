--! read
-- Everything the outbox knows of the thread: its pending/quarantined and its synced rows.
return {redis.call('HGETALL', OS), redis.call('HGETALL', SY), redis.call('HGET', M, 'id') or false}
