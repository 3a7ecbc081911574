-- task_fires: the task -> "occurrence:fired_at" hash, flat.
return redis.call('HGETALL', P .. 'tf')
