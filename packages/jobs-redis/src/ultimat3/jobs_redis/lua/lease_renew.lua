-- lease_renew: ARGV = key, slot, holder, ttl_ms. Extends an unexpired grant of the holder.
local k = P .. 'ls:' .. ARGV[1]
local s, holder, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = now_ms()
local f = redis.call('HMGET', k, 'h' .. s, 'e' .. s)
if f[1] ~= holder or tonumber(f[2]) <= now then
  return 0
end
local exp = now + ttl
redis.call('HSET', k, 'e' .. s, N(exp))
local pttl = redis.call('PTTL', k)
if pttl < 0 or now + pttl < exp + 60000 then
  redis.call('PEXPIREAT', k, N(exp + 60000))
end
return 1
