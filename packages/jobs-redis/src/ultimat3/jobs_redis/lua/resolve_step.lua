-- resolve_step: ARGV = id, step, ran ('1' | '0' | 'check'), output (JSON)?
-- {'missing'} | {'running'} | {'nostep', names...} | {'completed'} | {'ok', record or false}.
-- 'check' runs the checks and writes nothing.
local id, step, ran = ARGV[1], ARGV[2], ARGV[3]
local r = load(id)
if not r then
  return { 'missing' }
end
if r.state == 'running' then
  return { 'running' }
end
local skey = P .. 's:' .. id
local rec = redis.call('HGET', skey, step)
if not rec then
  local names = { 'nostep' }
  for _, n in ipairs(redis.call('HKEYS', skey)) do
    names[#names + 1] = n
  end
  return names
end
rec = cjson.decode(rec)
if rec.s == 'completed' then
  return { 'completed' }
end
if ran == 'check' then
  return { 'ok', false }
end
if ran == '0' then
  redis.call('HDEL', skey, step)
  return { 'ok', false }
end
local out = cjson.encode({
  s = 'completed', n = rec.n + 1, o = opt(ARGV[4]), u = N(now_ms()), q = rec.q,
})
redis.call('HSET', skey, step, out)
return { 'ok', out }
