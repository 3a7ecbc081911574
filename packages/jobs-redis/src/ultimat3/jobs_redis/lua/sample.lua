-- sample: ARGV = cap, queue... (distinct). queue_depth / queue_demand: per queue, in the order
-- named, {due waiting rows (ZCOUNT of w:queue up to now), running rows (ZCARD of r:queue), paused
-- 0/1}, each count capped at cap. O(log n) per queue; reads only.
local cap = tonumber(ARGV[1])
local now = now_ms()
local out = {}
for i = 2, #ARGV do
  local q = ARGV[i]
  local due = redis.call('ZCOUNT', P .. 'w:' .. q, '-inf', N(now))
  local running = redis.call('ZCARD', P .. 'r:' .. q)
  out[#out + 1] = { math.min(due, cap), math.min(running, cap), redis.call('SISMEMBER', P .. 'pq', q) }
end
return out
