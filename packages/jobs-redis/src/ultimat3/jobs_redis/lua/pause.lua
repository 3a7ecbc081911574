-- pause: ARGV = set ('pq' queues | 'pt' tasks), op ('add' | 'rem' | 'list'), name?
local key = P .. ARGV[1]
if ARGV[2] == 'add' then
  return redis.call('SADD', key, ARGV[3])
elseif ARGV[2] == 'rem' then
  return redis.call('SREM', key, ARGV[3])
end
return redis.call('SMEMBERS', key)
