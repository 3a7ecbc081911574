-- lease_release: ARGV = key, slot, holder. Frees the slot when the holder holds it.
local k = P .. 'ls:' .. ARGV[1]
local s = ARGV[2]
if redis.call('HGET', k, 'h' .. s) ~= ARGV[3] then
  return 0
end
redis.call('HDEL', k, 'h' .. s, 't' .. s, 'e' .. s)
return 1
