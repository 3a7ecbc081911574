-- requeue: ARGV = id, from_step?
-- Answers {'missing'} | {'state', state} (not finished) | {'held', holder id, holder state} |
-- {'nostep', step names...} | {'ok', row} ('held' also carries the row's name and key). Back to ready with attempts 0, due now; completed steps
-- are kept, and from_step drops that step and every step first recorded after it.
local id, from_step = ARGV[1], opt(ARGV[2])
local r = load(id)
if not r then
  return { 'missing' }
end
if not TERMINAL[r.state] then
  return { 'state', r.state }
end
local holder = redis.call('HGET', P .. 'live', r.lk)
if holder then
  return { 'held', holder, redis.call('HGET', P .. 'j:' .. holder, 'state') or 'unknown',
    r.name, redis.call('HGET', P .. 'j:' .. id, 'idempotency_key') }
end
local now = now_ms()
if from_step then
  local skey = P .. 's:' .. id
  local steps = hgetall(skey)
  if not steps[from_step] then
    local names = { 'nostep' }
    for n, _ in pairs(steps) do
      names[#names + 1] = n
    end
    return names
  end
  local cut = cjson.decode(steps[from_step]).q
  for n, rec in pairs(steps) do
    if cjson.decode(rec).q >= cut then
      redis.call('HDEL', skey, n)
    end
  end
end
local k = P .. 'j:' .. id
redis.call('HSET', k, 'attempts', 0, 'run_at', N(now))
redis.call('HDEL', k, 'finished_at', 'result', 'worker_id', 'claim', 'lease_expires_at')
forget_wait(r)
move(r, 'ready', now, now)
announce(r.queue)
return { 'ok', row_flat(id) }
