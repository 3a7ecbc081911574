-- ack: ARGV = id, worker_id, claim, result (JSON)?, duration_ms?
-- Fenced: lands only while (worker_id, claim) holds the running row. Answers 1 or 0.
local id = ARGV[1]
if not held(id, ARGV[2], ARGV[3]) then
  return 0
end
local now = now_ms()
local key = P .. 'j:' .. id
local result = opt(ARGV[4])
if result then
  redis.call('HSET', key, 'result', result, 'finished_at', N(now))
else
  redis.call('HSET', key, 'finished_at', N(now))
  redis.call('HDEL', key, 'result')
end
redis.call('HDEL', key, 'worker_id', 'claim', 'lease_expires_at')
local r = load(id)
move(r, 'done', now, now)
count(r.name, 'd', now, tonumber(opt(ARGV[5])))
return 1
