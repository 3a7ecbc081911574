-- cancel: ARGV = id, error (JSON). {'missing'} | {'ended', state} | {'ok', row}.
-- A live row becomes cancelled, its claim void; no counter moves (a cancel is not a settle).
local id = ARGV[1]
local r = load(id)
if not r then
  return { 'missing' }
end
if not LIVE[r.state] then
  return { 'ended', r.state }
end
local now = now_ms()
local k = P .. 'j:' .. id
redis.call('HSET', k, 'last_error', ARGV[2], 'finished_at', N(now))
redis.call('HDEL', k, 'worker_id', 'claim', 'lease_expires_at')
forget_wait(r)
move(r, 'cancelled', now, now)
return { 'ok', row_flat(id) }
