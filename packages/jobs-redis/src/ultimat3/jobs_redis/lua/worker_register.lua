-- worker_register: ARGV = id, host, queues (JSON list), slots?, visibility_timeout_ms.
-- (Re)writes the worker's row; it lapses one visibility timeout after its last heartbeat (the
-- key itself expires a day later, so a killed worker's row cleans itself up). Answers now.
local id, vt = ARGV[1], tonumber(ARGV[5])
local k = P .. 'wk:' .. id
local now = now_ms()
redis.call('DEL', k)
redis.call('HSET', k, 'host', ARGV[2], 'queues', ARGV[3], 'vt', N(vt), 'started', N(now),
  'hb', N(now), 'in_flight', '[]')
local slots = opt(ARGV[4])
if slots then
  redis.call('HSET', k, 'slots', slots)
end
redis.call('PEXPIREAT', k, N(now + vt + 86400000))
redis.call('SADD', P .. 'wks', id)
return now
