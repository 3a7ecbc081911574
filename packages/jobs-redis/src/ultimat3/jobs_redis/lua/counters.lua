-- counters: ARGV = since_ms. The buckets of the finest tier still covering since_ms that end after
-- it and are not past their retention: {now, tier bucket_ms, start, flat bucket, ...}.
local now = now_ms()
local since = tonumber(ARGV[1])
local tier = #TIERS
for t = 1, #TIERS do
  if now - since <= TIERS[t][2] then
    tier = t
    break
  end
end
local bucket, kept = TIERS[tier][1], TIERS[tier][2]
local lo = math.max(since - bucket, now - kept - bucket)
local out = { now, bucket }
for _, start in ipairs(redis.call('ZRANGEBYSCORE', P .. 'cb:' .. tier, '(' .. N(lo), '+inf')) do
  out[#out + 1] = start
  out[#out + 1] = redis.call('HGETALL', P .. 'c:' .. tier .. ':' .. start)
end
return out
