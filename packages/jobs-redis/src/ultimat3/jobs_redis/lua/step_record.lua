-- step_record: ARGV = id, name, state, worker_id, claim, output (JSON)?, error (JSON)?
-- Fenced. 'completed' and 'failed' count one execution, 'started' does not; a completed step is
-- never overwritten. Each step keeps the sequence number of its first record (q), so the steps
-- read back in the order they were first recorded. Answers 1 or 0.
local id, name, state = ARGV[1], ARGV[2], ARGV[3]
if not held(id, ARGV[4], ARGV[5]) then
  return 0
end
local skey = P .. 's:' .. id
local old = redis.call('HGET', skey, name)
local executions, seq = 0, nil
if old then
  old = cjson.decode(old)
  if old.s == 'completed' then
    return 0
  end
  executions, seq = old.n, old.q
end
if not seq then
  seq = redis.call('HINCRBY', P .. 'j:' .. id, 'sseq', 1)
end
if state ~= 'started' then
  executions = executions + 1
end
redis.call('HSET', skey, name, cjson.encode({
  s = state, n = executions, o = opt(ARGV[6]), e = opt(ARGV[7]), u = N(now_ms()), q = seq,
}))
return 1
