-- list: ARGV = index ('' every row, else a state), order ('desc' | 'asc'), max bound, min bound
-- (ZRANGEBYLEX bounds over "%016d(created_at):id" members), limit, budget, queue?, name?,
-- tenant_id?, id_prefix?
-- Walks the index from one end, keeps the rows matching the filters, stops at `limit` rows or
-- after `budget` members looked at (so one call never blocks the server long). Answers {rows
-- (flat hashes), the last member looked at or false, 1 when the index ran out}.
local key = ARGV[1] == '' and (P .. 'ix') or (P .. 'ix:' .. ARGV[1])
local desc = ARGV[2] == 'desc'
local hi, lo = ARGV[3], ARGV[4]
local limit, budget = tonumber(ARGV[5]), tonumber(ARGV[6])
local queue, name, tenant, prefix = opt(ARGV[7]), opt(ARGV[8]), ARGV[9], opt(ARGV[10])
local any_tenant = tenant == ''
local tenant_value = opt(tenant)
local filtered = queue or name or not any_tenant
local rows, scanned, last, done = {}, 0, false, false
while #rows < limit and scanned < budget do
  local batch = math.min(256, budget - scanned)
  local members
  if desc then
    members = redis.call('ZREVRANGEBYLEX', key, hi, lo, 'LIMIT', 0, batch)
  else
    members = redis.call('ZRANGEBYLEX', key, lo, hi, 'LIMIT', 0, batch)
  end
  for _, m in ipairs(members) do
    scanned = scanned + 1
    last = m
    local id = string.sub(m, 18)
    local keep = (not prefix) or string.sub(id, 1, #prefix) == prefix
    if keep and filtered then
      local f = redis.call('HMGET', P .. 'j:' .. id, 'queue', 'name', 'tenant_id')
      keep = (not queue or f[1] == queue) and (not name or f[2] == name)
        and (any_tenant or f[3] == tenant_value)
    end
    if keep then
      local flat = row_flat(id)
      if flat then
        rows[#rows + 1] = flat
        if #rows >= limit then
          break
        end
      end
    end
  end
  if #members < batch then
    done = true
    break
  end
  if desc then
    hi = '(' .. last
  else
    lo = '(' .. last
  end
end
return { rows, last, done and 1 or 0 }
