-- progress: ARGV = id, worker_id, claim, progress (JSON). Fenced; answers 1 or 0.
local id = ARGV[1]
if not held(id, ARGV[2], ARGV[3]) then
  return 0
end
redis.call('HSET', P .. 'j:' .. id, 'progress', ARGV[4], 'updated_at', N(now_ms()))
return 1
