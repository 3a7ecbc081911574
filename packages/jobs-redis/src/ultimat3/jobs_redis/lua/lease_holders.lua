-- lease_holders: ARGV = key. {now, flat slot hash}.
return { now_ms(), redis.call('HGETALL', P .. 'ls:' .. ARGV[1]) }
