-- enqueue: one request, ENQUEUE_ARGS (13) arguments: id, run_id, name, queue, idempotency_key,
-- max_attempts, tenant_id, concurrency_key, delay_ms, run_at_ms, live key, trace context (JSON
-- text), payload (JSON text, stored as given); tenant_id to trace context optional ("" for None,
-- else "=" .. value).
-- Dedupe on the live key first (first payload wins), then on the id (an outbox republish).
-- Answers 0 when it inserted the row, or { id, run_id } of the row that dedupes it.
return enqueue_one()
