-- task_fire: ARGV = task, occurrence_ms. Records the occurrence as the task's last fire unless it
-- is not later than the one recorded. Answers 1 or 0.
local last = redis.call('HGET', P .. 'tf', ARGV[1])
if last then
  local occ = tonumber(string.match(last, '^(-?%d+)'))
  if tonumber(ARGV[2]) <= occ then
    return 0
  end
end
redis.call('HSET', P .. 'tf', ARGV[1], ARGV[2] .. ':' .. N(now_ms()))
return 1
