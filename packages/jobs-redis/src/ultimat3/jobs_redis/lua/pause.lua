-- pause: ARGV = set ('pq' queues | 'pt' tasks), op ('add' | 'rem' | 'list'), name?
local key = P .. ARGV[1]
if ARGV[2] == 'add' then
  return redis.call('SADD', key, ARGV[3])
elseif ARGV[2] == 'rem' then
  local removed = redis.call('SREM', key, ARGV[3])
  if removed == 1 and ARGV[1] == 'pq' then
    announce(ARGV[3])
  end
  return removed
end
return redis.call('SMEMBERS', key)
