-- bulk: ARGV = action ('remove' | 'requeue' | 'promote' | 'cancel'), state, max rows, queue?,
-- name?, tenant_id? ('' any tenant), error JSON (cancel only).
-- Acts on up to `max` matching rows in `state`, oldest first. Answers {affected, remaining}.
-- requeue skips a row whose live key a live job holds (not counted in remaining; remaining is the
-- number of distinct unheld live keys left); promote keeps only rows waiting on their run_at.
local action, state, max = ARGV[1], ARGV[2], tonumber(ARGV[3])
local queue, name, tenant = opt(ARGV[4]), opt(ARGV[5]), ARGV[6]
local any_tenant = tenant == ''
local tenant_value = opt(tenant)
local now = now_ms()
local key = P .. 'ix:' .. state

local function matching()
  local out = {}
  local lo = '-'
  while true do
    local members = redis.call('ZRANGEBYLEX', key, lo, '+', 'LIMIT', 0, 1000)
    for _, m in ipairs(members) do
      local id = string.sub(m, 18)
      local f = redis.call('HMGET', P .. 'j:' .. id, 'queue', 'name', 'tenant_id', 'run_at', 'lk')
      if f[5] and (not queue or f[1] == queue) and (not name or f[2] == name)
        and (any_tenant or f[3] == tenant_value) then
        out[#out + 1] = { id = id, run_at = tonumber(f[4]), lk = f[5] }
      end
    end
    if #members < 1000 then
      return out
    end
    lo = '(' .. members[#members]
  end
end

local function put_back(id)
  local k = P .. 'j:' .. id
  local r = load(id)
  redis.call('HSET', k, 'attempts', 0, 'run_at', N(now))
  redis.call('HDEL', k, 'finished_at', 'result', 'worker_id', 'claim', 'lease_expires_at')
  forget_wait(r)
  move(r, 'ready', now, now)
  return r.queue
end

local rows = matching()
local affected = 0
local announced = {}
if action == 'remove' then
  for i = 1, math.min(max, #rows) do
    delete_row(load(rows[i].id))
    affected = affected + 1
  end
  return { affected, #rows - affected }
elseif action == 'cancel' then
  if not LIVE[state] then
    return { 0, 0 }
  end
  for i = 1, math.min(max, #rows) do
    local id = rows[i].id
    local r = load(id)
    local k = P .. 'j:' .. id
    redis.call('HSET', k, 'last_error', ARGV[7], 'finished_at', N(now))
    redis.call('HDEL', k, 'worker_id', 'claim', 'lease_expires_at')
    forget_wait(r)
    move(r, 'cancelled', now, now)
    affected = affected + 1
  end
  return { affected, #rows - affected }
elseif action == 'promote' then
  local due = {}
  for _, row in ipairs(rows) do
    if state == 'delayed' or row.run_at > now then
      due[#due + 1] = row
    end
  end
  for i = 1, math.min(max, #due) do
    local id = due[i].id
    redis.call('HSET', P .. 'j:' .. id, 'run_at', N(now))
    local r = load(id)
    move(r, 'ready', now, now)
    announced[r.queue] = true
    affected = affected + 1
  end
  for queue, _ in pairs(announced) do
    announce(queue)
  end
  return { affected, #due - affected }
else
  for _, row in ipairs(rows) do
    if affected >= max then
      break
    end
    if not redis.call('HGET', P .. 'live', row.lk) then
      announced[put_back(row.id)] = true
      affected = affected + 1
    end
  end
  for queue, _ in pairs(announced) do
    announce(queue)
  end
  local movable, remaining = {}, 0
  for _, row in ipairs(rows) do
    if redis.call('HGET', P .. 'j:' .. row.id, 'state') == state
      and not movable[row.lk] and not redis.call('HGET', P .. 'live', row.lk) then
      movable[row.lk] = true
      remaining = remaining + 1
    end
  end
  return { affected, remaining }
end
