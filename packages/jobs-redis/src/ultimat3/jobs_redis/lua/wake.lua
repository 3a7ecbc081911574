-- wake_waiters: ARGV = event. Every row suspended on the event becomes due now (run_at lowered
-- to now, never raised). Answers how many.
local event = ARGV[1]
local now = now_ms()
local woken = 0
local due = {}
local ids = redis.call('SMEMBERS', P .. 'ev:' .. event)
for _, id in ipairs(ids) do
  local key = P .. 'j:' .. id
  local f = redis.call('HMGET', key, 'state', 'wait_event', 'run_at', 'queue')
  if f[1] == 'suspended' and f[2] == event then
    local run_at = math.min(tonumber(f[3]), now)
    redis.call('HSET', key, 'run_at', N(run_at), 'updated_at', N(now))
    redis.call('ZADD', P .. 'w:' .. f[4], N(run_at), id)
    woken = woken + 1
    due[f[4]] = true
  else
    redis.call('SREM', P .. 'ev:' .. event, id)
  end
end
for queue, _ in pairs(due) do
  announce(queue)
end
return woken
