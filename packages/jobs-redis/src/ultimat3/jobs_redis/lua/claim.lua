-- claim: ARGV = worker_id, limit, visibility_timeout_ms, nonce, lease-lost error template,
-- nq, queue..., nd, no_dead_letter name...
-- Due rows: waiting rows of unpaused queues with run_at <= now (at most `limit` per queue, oldest
-- run_at first, then id) plus running rows whose lease lapsed (at most `limit`, by expiry). A
-- lapsed row on its final attempt is buried (dead, or failed for a no_dead_letter name) and never
-- handed out. Answers {now, claimed rows, buried rows}; a claimed row ends with 1 when the job
-- has a step recorded, else 0 (its first steps.load then needs no round trip); a buried row is
-- {id, name, queue, attempts, max_attempts, state, lapsed worker, run_id, payload, tenant_id or
-- false, last_error}, then the ms until the next waiting row falls due (or false). A claimed
-- row's last two fields are its crash streak and, when this claim follows a crash, the worker
-- that died (else false). The queues
-- are served in turn: the first due row of each queue in the order named, then the second, ...
local worker, limit, vt, nonce, template = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local nq = tonumber(ARGV[6])
local nodead = {}
local nd = tonumber(ARGV[7 + nq])
for i = 1, nd do
  nodead[ARGV[7 + nq + i]] = true
end
local now = now_ms()
if limit <= 0 then
  return { now, {}, {} }
end

local function before(a, b)
  if a.at ~= b.at then
    return a.at < b.at
  end
  return lt(a.id, b.id)
end

local cands, lapsed, seen = {}, {}, {}
for i = 1, nq do
  local q = ARGV[6 + i]
  if not seen[q] and redis.call('SISMEMBER', P .. 'pq', q) == 0 then
    seen[q] = i
    local due = redis.call('ZRANGEBYSCORE', P .. 'w:' .. q, '-inf', N(now), 'WITHSCORES', 'LIMIT', 0, limit)
    for j = 1, #due, 2 do
      cands[#cands + 1] = { id = due[j], at = tonumber(due[j + 1]), q = q }
    end
    local lap = redis.call('ZRANGEBYSCORE', P .. 'r:' .. q, '-inf', N(now), 'WITHSCORES', 'LIMIT', 0, limit)
    for j = 1, #lap, 2 do
      lapsed[#lapsed + 1] = { id = lap[j], at = tonumber(lap[j + 1]), q = q }
    end
  end
end

-- A lapse is a CRASH when the worker holding the row is known dead (its registry row wk:<id>
-- expired: hb + vt <= now), not an attempt; it is DEFERRED while that row is live and names the
-- job in flight (at most one more window past the lease); else (no registry row) an attempt.
local function lapse_verdict(id, holder, lapsed_at)
  if not holder then
    return 'attempt'
  end
  local w = redis.call('HMGET', P .. 'wk:' .. holder, 'hb', 'vt', 'in_flight')
  local hb, wvt = tonumber(w[1]), tonumber(w[2])
  if not hb or not wvt then
    return 'attempt'
  end
  if hb + wvt <= now then
    return 'crash'
  end
  if lapsed_at + wvt > now and w[3] and string.find(w[3], '"' .. id .. '"', 1, true) then
    return 'defer'
  end
  return 'attempt'
end

table.sort(lapsed, before)
local buried = {}
local crashed = {}
for k = 1, math.min(limit, #lapsed) do
  local id = lapsed[k].id
  local key = P .. 'j:' .. id
  local f = redis.call('HMGET', key, 'attempts', 'max_attempts', 'run_at', 'worker_id', 'run_id',
    'payload', 'tenant_id')
  local attempts, max_attempts = tonumber(f[1]), tonumber(f[2])
  local verdict = attempts and lapse_verdict(id, f[4], lapsed[k].at) or 'attempt'
  if not attempts then
    redis.call('ZREM', P .. 'r:' .. lapsed[k].q, id) -- a row gone from under its index
  elseif verdict == 'defer' then
    -- its worker may still run it: wait for its registry row
  elseif verdict == 'crash' then
    crashed[id] = f[4]
    cands[#cands + 1] = { id = id, at = tonumber(f[3]), q = lapsed[k].q }
  elseif attempts >= max_attempts then
    local r = load(id)
    local state = nodead[r.name] and 'failed' or 'dead'
    local lapsed_worker = f[4] or ''
    local message = 'the lease lapsed on the final attempt (' .. f[1] .. ' of ' .. f[2] ..
      '): worker ' .. lapsed_worker .. ' stopped renewing it and no worker settled the run'
    local last_error = fill(template, message)
    redis.call('HSET', key, 'last_error', last_error, 'finished_at', N(now))
    redis.call('HDEL', key, 'worker_id', 'claim', 'lease_expires_at')
    move(r, state, now, now)
    count(r.name, state == 'failed' and 'f' or 'x', now, nil)
    buried[#buried + 1] = { id, r.name, r.queue, f[1], f[2], state, lapsed_worker, f[5], f[6],
      f[7], last_error }
  else
    cands[#cands + 1] = { id = id, at = tonumber(f[3]), q = lapsed[k].q }
  end
end

-- the queues in turn: the first due row of each queue (in the order named), then the second...
table.sort(cands, before)
local rank = {}
for c = 1, #cands do
  local q = cands[c].q
  rank[q] = (rank[q] or 0) + 1
  cands[c].rank = rank[q]
end
table.sort(cands, function(a, b)
  if a.rank ~= b.rank then
    return a.rank < b.rank
  end
  if seen[a.q] ~= seen[b.q] then
    return seen[a.q] < seen[b.q]
  end
  return before(a, b)
end)
local claimed = {}
local k = 0
for c = 1, #cands do
  if #claimed >= limit then
    break
  end
  local id = cands[c].id
  local key = P .. 'j:' .. id
  local f = redis.call('HMGET', key,
    'run_id', 'name', 'queue', 'payload', 'attempts', 'max_attempts', 'idempotency_key',
    'tenant_id', 'concurrency_key', 'created_at', 'state', 'lk', 'wait_event', 'trace_context',
    'sseq', 'crashes', 'crash_streak', 'crashed_at')
  if not f[1] then
    redis.call('ZREM', P .. 'w:' .. cands[c].q, id) -- a row gone from under its index
    redis.call('ZREM', P .. 'r:' .. cands[c].q, id)
  else
    k = k + 1
    local died = crashed[id]
    local crash = died and 1 or 0
    local attempts = tonumber(f[5]) + 1 - crash
    local streak = (tonumber(f[17]) or 0) + crash
    local since = tonumber(f[18])
    if died and since then -- a step completed since the crash before: progress, a new streak
      for _, raw in ipairs(redis.call('HVALS', P .. 's:' .. id)) do
        local st = cjson.decode(raw)
        if st.s == 'completed' and tonumber(st.u) > since then
          streak = 1
          break
        end
      end
    end
    local token = nonce .. ':' .. k
    local lease = now + vt
    local r = { id = id, queue = f[3], state = f[11], created_at = f[10], lk = f[12],
      wait_event = f[13] or nil }
    forget_wait(r)
    redis.call('HSET', key, 'attempts', attempts, 'worker_id', worker, 'claim', token,
      'lease_expires_at', N(lease))
    if died then
      redis.call('HSET', key, 'crashes', (tonumber(f[16]) or 0) + 1, 'crash_streak', streak,
        'crashed_at', N(now))
    end
    move(r, 'running', now, lease)
    claimed[#claimed + 1] = { id, f[1], f[2], f[3], f[4], attempts, f[6], token, lease, f[7],
      f[8], f[9], f[10], f[14], f[15] and 1 or 0, streak, died or false }
  end
end
-- fewer than the limit handed out: the ms until the earliest waiting row of these queues that
-- falls due later (the worker's due timer), else false
local later = false
if #claimed < limit then
  for q, _ in pairs(seen) do
    local nxt = redis.call('ZRANGEBYSCORE', P .. 'w:' .. q, '(' .. N(now), '+inf', 'WITHSCORES',
      'LIMIT', 0, 1)
    if #nxt > 0 then
      local at = tonumber(nxt[2])
      if later == false or at < later then
        later = at
      end
    end
  end
  if later ~= false then
    later = later - now
  end
end
return { now, claimed, buried, later }
