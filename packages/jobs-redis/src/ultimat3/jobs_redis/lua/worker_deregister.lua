-- worker_deregister: ARGV = id. Answers 1 when the worker was known.
redis.call('SREM', P .. 'wks', ARGV[1])
return redis.call('DEL', P .. 'wk:' .. ARGV[1])
