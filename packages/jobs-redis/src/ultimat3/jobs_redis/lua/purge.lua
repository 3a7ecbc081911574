-- purge: ARGV = done_older_than_ms, dead_older_than_ms, batch. Deletes up to `batch` finished rows
-- past their retention (done by finished_at; failed, dead, cancelled likewise), with their steps;
-- on the last pass also drops expired workers and stale counter buckets. {deleted, more (0/1)}.
local now = now_ms()
local batch = tonumber(ARGV[3])
local deleted = 0
for _, pair in ipairs({ { 'fd', tonumber(ARGV[1]) }, { 'fe', tonumber(ARGV[2]) } }) do
  if deleted < batch then
    local z = P .. pair[1]
    local ids = redis.call('ZRANGEBYSCORE', z, '-inf', N(now - pair[2]), 'LIMIT', 0, batch - deleted)
    for _, id in ipairs(ids) do
      local r = load(id)
      if r then
        delete_row(r)
      else
        redis.call('ZREM', z, id)
      end
      deleted = deleted + 1
    end
  end
end
if deleted >= batch then
  return { deleted, 1 }
end
for _, id in ipairs(redis.call('SMEMBERS', P .. 'wks')) do
  local f = redis.call('HMGET', P .. 'wk:' .. id, 'hb', 'vt')
  if not f[1] or tonumber(f[1]) + tonumber(f[2]) <= now then
    redis.call('DEL', P .. 'wk:' .. id)
    redis.call('SREM', P .. 'wks', id)
  end
end
for t = 1, #TIERS do
  redis.call('ZREMRANGEBYSCORE', P .. 'cb:' .. t, '-inf', N(now - TIERS[t][2] - TIERS[t][1]))
end
return { deleted, 0 }
