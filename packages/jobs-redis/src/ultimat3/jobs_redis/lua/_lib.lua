-- The prelude every script of the Redis job driver starts with (the driver concatenates it in
-- front of each script body before register_script). KEYS[1] is the key prefix, "{x}:": every
-- key a script touches starts with it, so all of them hash to one cluster slot.
--
-- Keys (P = KEYS[1]):
--   P.."j:"..id      hash   one job row (fields named as JobRow's, plus lk, claim, wait_event,
--                           sseq); absent field = None
--   P.."s:"..id      hash   the job's steps: step name -> cjson {s, n, o, e, u, q}
--   P.."live"        hash   live key -> id (rows in ready/delayed/running/suspended only)
--   P.."w:"..queue   zset   waiting rows (ready, delayed, suspended) scored by run_at
--   P.."r:"..queue   zset   running rows scored by lease_expires_at
--   P.."ix"          zset   every row, lex members "%016d(created_at):id" (score 0)
--   P.."ix:"..state  zset   the same, per state
--   P.."fd" / "fe"   zset   done / (failed, dead, cancelled) rows scored by finished_at
--   P.."ev:"..event  set    ids suspended waiting on event
--   P.."q:"..queue   hash   state -> row count; P.."queues" set of every queue seen
--   P.."pq" / "pt"   set    paused queues / tasks; P.."tf" hash task -> "occurrence:fired_at"
--   P.."wk:"..id     hash   one registered worker; P.."wks" set of worker ids
--   P.."ls:"..key    hash   lease slots: h<slot> holder, t<slot> token, e<slot> expiry
--   P.."lseq"        string the lease fencing-token counter
--   P.."c:"..tier..":"..start hash counter bucket (kind letter .. job name -> count);
--   P.."cb:"..tier   zset   bucket starts of a tier
--   P.."bf:"..id     hash   one backfill pass; P.."bfo" zset of pass ids by sequence
--   P.."due"        pub/sub channel: a queue's name, each time one of its jobs becomes due now

local P = KEYS[1]

local LIVE = { ready = true, delayed = true, running = true, suspended = true }
local WAITING = { ready = true, delayed = true, suspended = true }
local TERMINAL = { done = true, failed = true, dead = true, cancelled = true }
local TIERS = __COUNTER_TIERS__

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A whole number as Redis should store it (never in exponent form).
local function N(x)
  return string.format('%.0f', x)
end

-- Optional arguments cross as "" (None) or "=" .. value.
local function opt(a)
  if a == nil or a == '' then
    return nil
  end
  return string.sub(a, 2)
end

-- Byte-wise a < b (Lua's own "<" follows the server's locale).
local function lt(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

local function ixm(created, id)
  return string.format('%016.0f', tonumber(created)) .. ':' .. id
end

local function hgetall(key)
  local flat = redis.call('HGETALL', key)
  local t = {}
  for i = 1, #flat, 2 do
    t[flat[i]] = flat[i + 1]
  end
  return t
end

-- The fields move() and delete_row() need, read from the row's hash.
local ROW_FIELDS = { 'id', 'queue', 'state', 'created_at', 'lk', 'wait_event', 'name' }
local function load(id)
  local f = redis.call('HMGET', P .. 'j:' .. id, unpack(ROW_FIELDS))
  if not f[1] then
    return nil
  end
  return {
    id = f[1], queue = f[2], state = f[3], created_at = f[4], lk = f[5],
    wait_event = f[6] or nil, name = f[7],
  }
end

local function held(id, worker, claim)
  local f = redis.call('HMGET', P .. 'j:' .. id, 'state', 'worker_id', 'claim')
  return f[1] == 'running' and f[2] == worker and f[3] == claim
end

-- Move row r (a table from load(), or a fresh one with state nil) to state `to`, keeping every
-- index exact. `score`: run_at for a waiting state, lease expiry for running, finished_at for a
-- terminal state.
local function move(r, to, now, score)
  local from = r.state
  local id = r.id
  if from ~= to then
    local m = ixm(r.created_at, id)
    if from then
      redis.call('ZREM', P .. 'ix:' .. from, m)
      redis.call('HINCRBY', P .. 'q:' .. r.queue, from, -1)
    end
    redis.call('ZADD', P .. 'ix:' .. to, 0, m)
    redis.call('HINCRBY', P .. 'q:' .. r.queue, to, 1)
    if from == 'running' then
      redis.call('ZREM', P .. 'r:' .. r.queue, id)
    elseif WAITING[from] and not WAITING[to] then
      redis.call('ZREM', P .. 'w:' .. r.queue, id)
    elseif from == 'done' then
      redis.call('ZREM', P .. 'fd', id)
    elseif TERMINAL[from] and not TERMINAL[to] then
      redis.call('ZREM', P .. 'fe', id)
    end
    if LIVE[from] and not LIVE[to] then
      if redis.call('HGET', P .. 'live', r.lk) == id then
        redis.call('HDEL', P .. 'live', r.lk)
      end
    elseif LIVE[to] and not LIVE[from] then
      redis.call('HSET', P .. 'live', r.lk, id)
    end
  end
  if to == 'running' then
    redis.call('ZADD', P .. 'r:' .. r.queue, N(score), id)
  elseif WAITING[to] then
    redis.call('ZADD', P .. 'w:' .. r.queue, N(score), id)
  elseif to == 'done' then
    redis.call('ZADD', P .. 'fd', N(score), id)
  else
    redis.call('ZADD', P .. 'fe', N(score), id)
  end
  redis.call('HSET', P .. 'j:' .. id, 'state', to, 'updated_at', N(now))
  r.state = to
end

local function forget_wait(r)
  if r.wait_event then
    redis.call('SREM', P .. 'ev:' .. r.wait_event, r.id)
    redis.call('HDEL', P .. 'j:' .. r.id, 'wait_event')
    r.wait_event = nil
  end
end

local function delete_row(r)
  local id = r.id
  local m = ixm(r.created_at, id)
  redis.call('ZREM', P .. 'ix', m)
  redis.call('ZREM', P .. 'ix:' .. r.state, m)
  redis.call('HINCRBY', P .. 'q:' .. r.queue, r.state, -1)
  if r.state == 'running' then
    redis.call('ZREM', P .. 'r:' .. r.queue, id)
  elseif WAITING[r.state] then
    redis.call('ZREM', P .. 'w:' .. r.queue, id)
  elseif r.state == 'done' then
    redis.call('ZREM', P .. 'fd', id)
  else
    redis.call('ZREM', P .. 'fe', id)
  end
  if LIVE[r.state] and redis.call('HGET', P .. 'live', r.lk) == id then
    redis.call('HDEL', P .. 'live', r.lk)
  end
  if r.wait_event then
    redis.call('SREM', P .. 'ev:' .. r.wait_event, id)
  end
  redis.call('DEL', P .. 'j:' .. id, P .. 's:' .. id)
end

-- One settle counted in every tier: kind is 'd' done, 'r' retried, 'f' failed, 'x' dead;
-- 't' carries the summed duration.
local function count(job, kind, now, duration)
  for t = 1, #TIERS do
    local bucket, kept = TIERS[t][1], TIERS[t][2]
    local start = now - (now % bucket)
    local key = P .. 'c:' .. t .. ':' .. N(start)
    local fresh = redis.call('EXISTS', key) == 0
    redis.call('HINCRBY', key, kind .. job, 1)
    if duration and duration > 0 then
      redis.call('HINCRBY', key, 't' .. job, N(duration))
    end
    if fresh then
      -- The bucket now exists, so its expiry can be set (PEXPIREAT on no key sets nothing).
      redis.call('PEXPIREAT', key, N(start + bucket + kept + 60000))
      redis.call('ZADD', P .. 'cb:' .. t, N(start), N(start))
      redis.call('ZREMRANGEBYSCORE', P .. 'cb:' .. t, '-inf', N(now - kept - bucket))
    end
  end
end

-- Tell listeners (RedisWakeListener) that `queue` has a job due now: PUBLISH on P .. 'due'.
-- Costs nothing much when nobody listens; a missed message only waits for the next poll.
local function announce(queue)
  redis.call('PUBLISH', P .. 'due', queue)
end

-- The stored error of a lapse on the final attempt: the template is XError.to_dict() JSON with
-- the message "@@MSG@@", filled here.
local function fill(template, message)
  local i, j = string.find(template, '"@@MSG@@"', 1, true)
  return string.sub(template, 1, i - 1) .. cjson.encode(message) .. string.sub(template, j + 1)
end

-- The row's whole hash as a flat array (for the driver to decode), or false.
local function row_flat(id)
  local flat = redis.call('HGETALL', P .. 'j:' .. id)
  if #flat == 0 then
    return false
  end
  return flat
end

-- Unused locals are fine: every script gets the whole prelude.
local _ = { now_ms, N, opt, lt, ixm, hgetall, load, held, move, forget_wait, delete_row, count,
  fill, row_flat, announce, LIVE, WAITING, TERMINAL }

-- enqueue's body: enqueue_one() for enqueue.lua (one request), enqueue_pairs() for
-- enqueue_many.lua and fire_task.lua. A request is ENQUEUE_ARGS arguments from ARGV[a] on: id,
-- run_id, name, queue, idempotency_key, max_attempts, tenant_id, concurrency_key, delay_ms,
-- run_at_ms, live key, trace context (JSON text), payload (JSON text, stored as given); the
-- optional ones (tenant_id to trace context) as opt() takes them. Dedupe on the live key first
-- (first payload wins), then on the id (an outbox republish).
local ENQUEUE_ARGS = 13

-- One request from ARGV[a] on, at the server's time `now` (`stamp` = N(now)). Answers the id and
-- run_id that hold it when it dedupes; else inserts the row and answers nil, nil and its queue
-- (for the caller to announce, due now or later).
local function enqueue_at(a, now, stamp)
  local id, queue, lk = ARGV[a], ARGV[a + 3], ARGV[a + 10]
  local live = P .. 'live'
  -- The live key taken for this request in one call; when another holds it, that one answers
  -- (unless its row is gone: a dangling entry, a row evicted under maxmemory).
  local took = redis.call('HSETNX', live, lk, id) == 1
  if not took then
    local holder = redis.call('HGET', live, lk)
    local holder_run = redis.call('HGET', P .. 'j:' .. holder, 'run_id')
    if holder_run then
      return holder, holder_run, nil
    end
  end
  local key = P .. 'j:' .. id
  local same_run = redis.call('HGET', key, 'run_id')
  if same_run then
    -- An outbox republish of a row that is no longer live: no live entry for it.
    redis.call('HDEL', live, lk)
    return id, same_run, nil
  end
  if not took then
    redis.call('HSET', live, lk, id) -- over the dangling entry
  end
  -- run_at: now unless the request says when (run_at_ms) or how much later (delay_ms).
  local run_at, run_stamp = now, stamp
  local at, delay = ARGV[a + 9], ARGV[a + 8]
  if at ~= '' then
    run_at = tonumber(opt(at))
    run_stamp = N(run_at)
  elseif delay ~= '' then
    run_at = now + tonumber(opt(delay))
    run_stamp = N(run_at)
  end
  -- A new row: the row with its state in one HSET, then its indexes (the hot path of every
  -- enqueue: as few calls, and as little Lua, as it takes). The fields are written out twice so
  -- that a request without tenant, concurrency key or trace context builds no table (keep the
  -- two lists the same).
  local state = run_at > now and 'delayed' or 'ready'
  local tenant, ckey, trace = ARGV[a + 6], ARGV[a + 7], ARGV[a + 11]
  if tenant == '' and ckey == '' and trace == '' then
    redis.call('HSET', key, 'id', id, 'run_id', ARGV[a + 1], 'name', ARGV[a + 2], 'queue', queue,
      'attempts', 0, 'max_attempts', ARGV[a + 5], 'run_at', run_stamp, 'created_at', stamp,
      'idempotency_key', ARGV[a + 4], 'payload', ARGV[a + 12], 'lk', lk, 'state', state,
      'updated_at', stamp)
  else
    local row = {
      'id', id, 'run_id', ARGV[a + 1], 'name', ARGV[a + 2], 'queue', queue,
      'attempts', 0, 'max_attempts', ARGV[a + 5], 'run_at', run_stamp, 'created_at', stamp,
      'idempotency_key', ARGV[a + 4], 'payload', ARGV[a + 12], 'lk', lk, 'state', state,
      'updated_at', stamp,
    }
    tenant, ckey, trace = opt(tenant), opt(ckey), opt(trace)
    if tenant then
      row[#row + 1] = 'tenant_id'
      row[#row + 1] = tenant
    end
    if ckey then
      row[#row + 1] = 'concurrency_key'
      row[#row + 1] = ckey
    end
    if trace then
      row[#row + 1] = 'trace_context'
      row[#row + 1] = trace
    end
    redis.call('HSET', key, unpack(row))
  end
  -- ixm(now, id), without string.format: stamp is N(now), whole and below 1e16.
  local m = string.rep('0', 16 - #stamp) .. stamp .. ':' .. id
  redis.call('ZADD', P .. 'ix', 0, m)
  redis.call('ZADD', P .. 'ix:' .. state, 0, m)
  -- The queue's first row in this state: note the queue too (the set only ever grows, so a count
  -- already past 1 means the queue is in it).
  if redis.call('HINCRBY', P .. 'q:' .. queue, state, 1) == 1 then
    redis.call('SADD', P .. 'queues', queue)
  end
  redis.call('ZADD', P .. 'w:' .. queue, run_stamp, id)
  -- announced whether due now or later: a delayed row wakes the worker, whose claim reads when
  -- it falls due (its due timer)
  return nil, nil, queue
end

-- enqueue.lua: one request from ARGV[1] on. Answers 0 for a new row (the caller knows its id
-- and run_id), or { id, run_id } of the row that holds it (a dedupe): the smallest reply.
local function enqueue_one()
  local now = now_ms()
  local holder, holder_run, due = enqueue_at(1, now, N(now))
  if holder then
    return { holder, holder_run }
  end
  if due then
    announce(due)
  end
  return 0
end

-- n requests from ARGV[at] on. Answers a flat array: id, run_id, deduped (0/1) per request, in
-- input order.
local function enqueue_pairs(n, at)
  local now = now_ms()
  local stamp = N(now)
  local out = {}
  local due = {}
  for i = 0, n - 1 do
    local a = at + i * ENQUEUE_ARGS
    local holder, holder_run, queue = enqueue_at(a, now, stamp)
    if holder then
      out[#out + 1] = holder
      out[#out + 1] = holder_run
      out[#out + 1] = 1
    else
      out[#out + 1] = ARGV[a]
      out[#out + 1] = ARGV[a + 1]
      out[#out + 1] = 0
      if queue then
        due[queue] = true
      end
    end
  end
  for queue, _ in pairs(due) do
    announce(queue)
  end
  return out
end
