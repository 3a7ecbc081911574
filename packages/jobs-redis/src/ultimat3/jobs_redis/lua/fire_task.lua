-- fire_task: ARGV = task, occurrence_ms, n, then enqueue's 13 arguments per request. ONE script,
-- so one atomic step: the task's watermark moves only when occurrence_ms is later than the
-- recorded one, and the occurrence's jobs are enqueued (enqueue's own dedupe) only when it moved.
-- A paused task (the 'pt' set) does not fire. Every request was checked by the driver before the
-- call. Answers 1 (fired) or 0.
if redis.call('SISMEMBER', P .. 'pt', ARGV[1]) == 1 then
  return 0
end
local last = redis.call('HGET', P .. 'tf', ARGV[1])
if last then
  local occ = tonumber(string.match(last, '^(-?%d+)'))
  if tonumber(ARGV[2]) <= occ then
    return 0
  end
end
redis.call('HSET', P .. 'tf', ARGV[1], ARGV[2] .. ':' .. N(now_ms()))
enqueue_pairs(tonumber(ARGV[3]), 4)
return 1
