-- enqueue: ARGV[1] = n, then 2 arguments per request: its fields as one JSON array
-- [id, run_id, name, queue, idempotency_key, max_attempts, tenant_id, concurrency_key, delay_ms,
-- run_at_ms, live key, trace context object] (null for None), and its payload (JSON text,
-- stored as given).
-- Dedupe on the live key first (first payload wins), then on the id (an outbox republish).
-- Answers a flat array: id, run_id, deduped (0/1) per request, in input order.
local function field(v)
  if v == cjson.null then
    return nil
  end
  return v
end
local now = now_ms()
local n = tonumber(ARGV[1])
local out = {}
local due = {}
for i = 0, n - 1 do
  local f = cjson.decode(ARGV[2 + i * 2])
  local payload = ARGV[3 + i * 2]
  local id, run_id, name, queue = f[1], f[2], f[3], f[4]
  local lk = f[11]
  local holder = redis.call('HGET', P .. 'live', lk)
  local holder_run = holder and redis.call('HGET', P .. 'j:' .. holder, 'run_id')
  if holder and holder_run then
    out[#out + 1] = holder
    out[#out + 1] = holder_run
    out[#out + 1] = 1
  else
    if holder then
      redis.call('HDEL', P .. 'live', lk) -- a dangling entry (a row evicted under maxmemory)
    end
    local same_run = redis.call('HGET', P .. 'j:' .. id, 'run_id')
    if same_run then
      out[#out + 1] = id
      out[#out + 1] = same_run
      out[#out + 1] = 1
    else
      local tenant, ckey = field(f[7]), field(f[8])
      local delay, run_at = field(f[9]), field(f[10])
      if not run_at then
        run_at = now + (delay or 0)
      end
      local key = P .. 'j:' .. id
      redis.call('HSET', key,
        'id', id, 'run_id', run_id, 'name', name, 'queue', queue,
        'attempts', 0, 'max_attempts', N(f[6]),
        'run_at', N(run_at), 'created_at', N(now),
        'idempotency_key', f[5], 'payload', payload, 'lk', lk)
      if tenant then
        redis.call('HSET', key, 'tenant_id', tenant)
      end
      if ckey then
        redis.call('HSET', key, 'concurrency_key', ckey)
      end
      local trace = field(f[12])
      if trace then
        redis.call('HSET', key, 'trace_context', cjson.encode(trace))
      end
      local r = { id = id, queue = queue, created_at = now, lk = lk }
      redis.call('ZADD', P .. 'ix', 0, ixm(now, id))
      redis.call('SADD', P .. 'queues', queue)
      move(r, run_at > now and 'delayed' or 'ready', now, run_at)
      if run_at <= now then
        due[queue] = true
      end
      out[#out + 1] = id
      out[#out + 1] = run_id
      out[#out + 1] = 0
    end
  end
end
for queue, _ in pairs(due) do
  announce(queue)
end
return out
