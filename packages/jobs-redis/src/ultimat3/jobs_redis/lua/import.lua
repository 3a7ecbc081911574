-- import: ARGV[1] = a JSON array of rows moved from another driver (`x jobs drain`), each
-- {id, run_id, name, queue, state ('ready' | 'delayed'), payload, idempotency_key, tenant_id,
-- concurrency_key, attempts, max_attempts, run_at, created_at, last_error, progress,
-- trace_context, lk, steps}: payload, last_error, progress, trace_context as JSON text or null,
-- times in epoch ms, steps [[name, state, executions, output JSON?, error JSON?, updated ms], ...]
-- in the order they were first recorded.
-- Per row, in order: an id already here adds nothing (a batch imported again after a crash,
-- whatever became of the row since); a live key another live row holds adds nothing either (one
-- live job per key); else the row goes in with its state, attempts, run_at, created_at and
-- steps, and nothing is counted (a moved job is not a settled one).
-- Answers a flat array: outcome ('moved' | 'present' | 'deduped'), the id holding the row, per row.
local function field(v)
  if v == cjson.null then
    return nil
  end
  return v
end
local now = now_ms()
local rows = cjson.decode(ARGV[1])
local out = {}
local due = {}
for i = 1, #rows do
  local j = rows[i]
  local id = j.id
  local key = P .. 'j:' .. id
  local holder = redis.call('HGET', P .. 'live', j.lk)
  if redis.call('EXISTS', key) == 1 then
    out[#out + 1] = 'present'
    out[#out + 1] = id
  elseif holder and redis.call('EXISTS', P .. 'j:' .. holder) == 1 then
    out[#out + 1] = 'deduped'
    out[#out + 1] = holder
  else
    redis.call('HSET', key,
      'id', id, 'run_id', j.run_id, 'name', j.name, 'queue', j.queue,
      'attempts', N(j.attempts), 'max_attempts', N(j.max_attempts),
      'run_at', N(j.run_at), 'created_at', N(j.created_at),
      'idempotency_key', j.idempotency_key, 'lk', j.lk)
    for _, name in ipairs({ 'payload', 'tenant_id', 'concurrency_key', 'last_error', 'progress',
      'trace_context' }) do
      local v = field(j[name])
      if v then
        redis.call('HSET', key, name, v)
      end
    end
    local steps = j.steps
    if #steps > 0 then
      local skey = P .. 's:' .. id
      for q = 1, #steps do
        local s = steps[q]
        redis.call('HSET', skey, s[1], cjson.encode({
          s = s[2], n = s[3], o = field(s[4]), e = field(s[5]), u = N(s[6]), q = q,
        }))
      end
      redis.call('HSET', key, 'sseq', #steps)
    end
    local r = { id = id, queue = j.queue, created_at = j.created_at, lk = j.lk }
    redis.call('ZADD', P .. 'ix', 0, ixm(j.created_at, id))
    redis.call('SADD', P .. 'queues', j.queue)
    move(r, j.state, now, j.run_at)
    if j.run_at <= now then
      due[j.queue] = true
    end
    out[#out + 1] = 'moved'
    out[#out + 1] = id
  end
end
for queue, _ in pairs(due) do
  announce(queue)
end
return out
