-- 0002: the enqueuing request's trace context (W3C traceparent / tracestate as a JSON object),
-- stored on the job row so the run's span links to the request that enqueued it. NULL when no
-- span was active at enqueue. Adding a nullable column with no default rewrites no row.

ALTER TABLE x_jobs ADD COLUMN trace_context jsonb;
