-- nack: ARGV = id, worker_id, claim, outcome, error (JSON)?, delay_ms?, run_at_ms?, wait_event?
-- Fenced. retry -> ready at run_at (counted retried); dead / failed -> settled (counted);
-- suspend -> suspended, the attempt handed back, wait_event remembered; release -> ready, the
-- attempt handed back. Answers 1 or 0.
local id, outcome = ARGV[1], ARGV[4]
if not held(id, ARGV[2], ARGV[3]) then
  return 0
end
local now = now_ms()
local key = P .. 'j:' .. id
local err = opt(ARGV[5])
local run_at = tonumber(opt(ARGV[7]))
local later = run_at or (now + math.max(0, tonumber(opt(ARGV[6])) or 0))
if err then
  redis.call('HSET', key, 'last_error', err)
end
redis.call('HDEL', key, 'worker_id', 'claim', 'lease_expires_at')
if outcome == 'retry' or outcome == 'dead' or outcome == 'failed' then
  redis.call('HDEL', key, 'crash_streak') -- an attempt settled: the crash streak ends
end
local r = load(id)
if outcome == 'retry' then
  redis.call('HSET', key, 'run_at', N(later))
  move(r, 'ready', now, later)
  count(r.name, 'r', now, nil)
  if later <= now then
    announce(r.queue)
  end
elseif outcome == 'dead' or outcome == 'failed' then
  redis.call('HSET', key, 'finished_at', N(now))
  move(r, outcome, now, now)
  count(r.name, outcome == 'dead' and 'x' or 'f', now, nil)
else
  local attempts = math.max(0, tonumber(redis.call('HGET', key, 'attempts')) - 1)
  redis.call('HSET', key, 'run_at', N(later), 'attempts', attempts)
  if outcome == 'suspend' then
    local event = opt(ARGV[8])
    if event then
      redis.call('HSET', key, 'wait_event', event)
      redis.call('SADD', P .. 'ev:' .. event, id)
    end
    move(r, 'suspended', now, later)
  else
    move(r, 'ready', now, later)
    if later <= now then
      announce(r.queue)
    end
  end
end
return 1
