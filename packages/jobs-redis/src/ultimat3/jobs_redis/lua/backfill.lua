-- backfill: ARGV = op, ...
--   begin id name job_id? cursor   -> the new pass (flat)
--   advance id rows cursor         -> 'ok' | 'missing'
--   finish id state                -> 'ok' | 'missing'
--   list limit                     -> newest first: {flat, ...}
local op = ARGV[1]
local now = now_ms()
if op == 'begin' then
  local k = P .. 'bf:' .. ARGV[2]
  local seq = redis.call('INCR', P .. 'bfseq')
  redis.call('HSET', k, 'id', ARGV[2], 'name', ARGV[3], 'state', 'running', 'rows', 0,
    'cursor', ARGV[5], 'started_at', N(now), 'updated_at', N(now))
  local job_id = opt(ARGV[4])
  if job_id then
    redis.call('HSET', k, 'job_id', job_id)
  end
  redis.call('ZADD', P .. 'bfo', seq, ARGV[2])
  return redis.call('HGETALL', k)
elseif op == 'advance' or op == 'finish' then
  local k = P .. 'bf:' .. ARGV[2]
  if redis.call('EXISTS', k) == 0 then
    return 'missing'
  end
  if op == 'advance' then
    redis.call('HINCRBY', k, 'rows', ARGV[3])
    redis.call('HSET', k, 'cursor', ARGV[4], 'updated_at', N(now))
  else
    redis.call('HSET', k, 'state', ARGV[3], 'updated_at', N(now))
  end
  return 'ok'
end
local out = {}
for _, id in ipairs(redis.call('ZREVRANGE', P .. 'bfo', 0, tonumber(ARGV[2]) - 1)) do
  out[#out + 1] = redis.call('HGETALL', P .. 'bf:' .. id)
end
return out
