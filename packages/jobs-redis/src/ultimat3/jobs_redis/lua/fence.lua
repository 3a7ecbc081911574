-- fence: ARGV = id, worker_id, claim[, step name]. 1 while (worker_id, claim) holds the running
-- row (and, given a step name, that step is not completed); 0 otherwise. Writes nothing.
local id = ARGV[1]
if not held(id, ARGV[2], ARGV[3]) then
  return 0
end
if ARGV[4] then
  local rec = redis.call('HGET', P .. 's:' .. id, ARGV[4])
  if rec and cjson.decode(rec).s == 'completed' then
    return 0
  end
end
return 1
