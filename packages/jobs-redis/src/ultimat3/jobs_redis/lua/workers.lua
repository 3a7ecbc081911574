-- workers: {now, {id, flat row}, ...} for every registered worker still stored.
local out = { now_ms() }
for _, id in ipairs(redis.call('SMEMBERS', P .. 'wks')) do
  local flat = redis.call('HGETALL', P .. 'wk:' .. id)
  if #flat == 0 then
    redis.call('SREM', P .. 'wks', id)
  else
    out[#out + 1] = { id, flat }
  end
end
return out
