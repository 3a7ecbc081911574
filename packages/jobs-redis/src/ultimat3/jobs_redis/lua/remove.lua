-- remove: ARGV = id. 'missing', 'running' (refused) or 'ok' (the row and its steps deleted).
local r = load(ARGV[1])
if not r then
  return 'missing'
end
if r.state == 'running' then
  return 'running'
end
delete_row(r)
return 'ok'
