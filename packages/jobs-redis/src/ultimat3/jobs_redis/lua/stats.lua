-- stats: per queue seen, a flat array of state, count pairs: {queue, {state, n, ...}, ...}.
local out = {}
for _, q in ipairs(redis.call('SMEMBERS', P .. 'queues')) do
  out[#out + 1] = q
  out[#out + 1] = redis.call('HGETALL', P .. 'q:' .. q)
end
return out
