-- enqueue_many: ARGV[1] = n, then ENQUEUE_ARGS (13) arguments per request, as enqueue.lua takes
-- one. Each request dedupes as enqueue's does (a later request of the same call on an earlier
-- one's live key too). Answers a flat array: id, run_id, deduped (0/1) per request, in input
-- order.
return enqueue_pairs(tonumber(ARGV[1]), 2)
