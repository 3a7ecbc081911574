-- show: ARGV = id. {row (flat hash) or false, steps (flat hash)}.
return { row_flat(ARGV[1]), redis.call('HGETALL', P .. 's:' .. ARGV[1]) }
