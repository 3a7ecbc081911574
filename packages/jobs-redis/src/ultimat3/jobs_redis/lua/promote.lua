-- promote: ARGV = id. {'missing'} | {'no', state, 'due' when ready and already due} | {'ok', row}.
-- A row waiting on its run_at (delayed, or ready backing off) becomes ready and due now.
local id = ARGV[1]
local r = load(id)
if not r then
  return { 'missing' }
end
local now = now_ms()
local run_at = tonumber(redis.call('HGET', P .. 'j:' .. id, 'run_at'))
if not (r.state == 'delayed' or (r.state == 'ready' and run_at > now)) then
  return { 'no', r.state }
end
redis.call('HSET', P .. 'j:' .. id, 'run_at', N(now))
move(r, 'ready', now, now)
announce(r.queue)
return { 'ok', row_flat(id) }
