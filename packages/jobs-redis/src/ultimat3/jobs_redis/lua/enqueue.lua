-- enqueue: ARGV[1] = n, then ENQUEUE_ARGS (13) arguments per request: id, run_id, name, queue,
-- idempotency_key, max_attempts, tenant_id, concurrency_key, delay_ms, run_at_ms, live key, trace
-- context (JSON text), payload (JSON text, stored as given); tenant_id to trace context optional
-- ("" for None, else "=" .. value).
-- Dedupe on the live key first (first payload wins), then on the id (an outbox republish).
-- Answers a flat array: id, run_id, deduped (0/1) per request, in input order.
return enqueue_pairs(tonumber(ARGV[1]), 2)
