-- redactions: the redaction catalog, one set per job name (members: a path as JSON text)
--   declare n name1 k1 path.. name2 k2 path..  -> 'ok' (a union per name)
--   lookup name...                             -> {members of name1}, {members of name2}, ...
local op = ARGV[1]
if op == 'declare' then
  local i = 3
  for _ = 1, tonumber(ARGV[2]) do
    local name, k = ARGV[i], tonumber(ARGV[i + 1])
    if k > 0 then
      redis.call('SADD', P .. 'red:' .. name, unpack(ARGV, i + 2, i + 1 + k))
    end
    i = i + 2 + k
  end
  return 'ok'
end
local out = {}
for j = 2, #ARGV do
  out[#out + 1] = redis.call('SMEMBERS', P .. 'red:' .. ARGV[j])
end
return out
