-- heartbeat: ARGV = id, worker_id, claim, visibility_timeout_ms. Fenced; answers 1 or 0.
local id = ARGV[1]
if not held(id, ARGV[2], ARGV[3]) then
  return 0
end
local now = now_ms()
local lease = now + tonumber(ARGV[4])
local queue = redis.call('HGET', P .. 'j:' .. id, 'queue')
redis.call('HSET', P .. 'j:' .. id, 'lease_expires_at', N(lease), 'updated_at', N(now))
redis.call('ZADD', P .. 'r:' .. queue, N(lease), id)
return 1
