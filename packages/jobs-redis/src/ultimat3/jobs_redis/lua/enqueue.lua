-- enqueue: ARGV[1] = n, then 2 arguments per request: its fields as one JSON array
-- [id, run_id, name, queue, idempotency_key, max_attempts, tenant_id, concurrency_key, delay_ms,
-- run_at_ms, live key, trace context object] (null for None), and its payload (JSON text,
-- stored as given).
-- Dedupe on the live key first (first payload wins), then on the id (an outbox republish).
-- Answers a flat array: id, run_id, deduped (0/1) per request, in input order.
return enqueue_pairs(tonumber(ARGV[1]), 2)
