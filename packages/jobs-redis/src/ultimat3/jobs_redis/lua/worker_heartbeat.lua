-- worker_heartbeat: ARGV = id, in_flight (JSON list). 0 for a worker nobody registered (or one
-- deregistered or purged); else renews the row and answers 1.
local k = P .. 'wk:' .. ARGV[1]
if redis.call('EXISTS', k) == 0 then
  return 0
end
local now = now_ms()
local vt = tonumber(redis.call('HGET', k, 'vt'))
redis.call('HSET', k, 'hb', N(now), 'in_flight', ARGV[2])
redis.call('PEXPIREAT', k, N(now + vt + 86400000))
return 1
