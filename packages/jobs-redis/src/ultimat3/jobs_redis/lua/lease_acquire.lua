-- lease_acquire: ARGV = key, limit, holder, ttl_ms. The holder's own unexpired slot (renewed), else
-- the first free or expired slot 0..limit-1, else false. Answers {slot, token, expires_at_ms}:
-- the token comes from one counter, so it is greater than every token granted before.
local k = P .. 'ls:' .. ARGV[1]
local limit, holder, ttl = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local now = now_ms()
local h = hgetall(k)
local chosen = nil
for s = 0, limit - 1 do
  if h['h' .. s] == holder and tonumber(h['e' .. s]) > now then
    chosen = s
    break
  end
end
if not chosen then
  for s = 0, limit - 1 do
    local e = h['e' .. s]
    if not e or tonumber(e) <= now then
      chosen = s
      break
    end
  end
end
if not chosen then
  return false
end
local token = redis.call('INCR', P .. 'lseq')
local exp = now + ttl
redis.call('HSET', k, 'h' .. chosen, holder, 't' .. chosen, token, 'e' .. chosen, N(exp))
local pttl = redis.call('PTTL', k)
if pttl < 0 or now + pttl < exp + 60000 then
  redis.call('PEXPIREAT', k, N(exp + 60000))
end
return { chosen, token, exp }
