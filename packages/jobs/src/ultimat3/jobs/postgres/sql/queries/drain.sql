-- ultimat3.jobs, x drain: moving jobs between drivers.
-- The rules every statement file follows are at the top of common.sql.

-- name: drain_take
-- x jobs drain: up to %(limit)s rows of one queue no worker holds (ready, delayed), oldest
-- run_at first (x_jobs_claim_idx), locked FOR UPDATE SKIP LOCKED until the drain's transaction
-- deletes them (drain_delete) and commits, or rolls back. Each row comes as the Redis import's
-- document: times in epoch ms, JSON columns as JSON text, its steps in the order they were first
-- recorded (x_job_steps_pkey). to_jsonb(j) reads the trace context when the column exists.
SELECT jsonb_build_object(
    'id', j.id, 'run_id', j.run_id, 'name', j.name, 'queue', j.queue, 'state', j.state,
    'payload', j.payload::text, 'idempotency_key', j.idempotency_key,
    'tenant_id', j.tenant_id, 'concurrency_key', j.concurrency_key,
    'attempts', j.attempts, 'max_attempts', j.max_attempts,
    'run_at', floor(extract(epoch FROM j.run_at) * 1000)::bigint,
    'created_at', floor(extract(epoch FROM j.created_at) * 1000)::bigint,
    'last_error', j.last_error::text, 'progress', j.progress::text,
    'trace_context', nullif(to_jsonb(j) -> 'trace_context', 'null'::jsonb)::text,
    'steps', coalesce((
        SELECT jsonb_agg(jsonb_build_array(
                   s.name, s.state, s.executions, s.output::text, s.error::text,
                   floor(extract(epoch FROM s.updated_at) * 1000)::bigint)
               ORDER BY s.created_at, s.name)
        FROM {x_job_steps} s
        WHERE s.job_id = j.id), '[]'::jsonb))
FROM {x_jobs} j
WHERE j.queue = %(queue)s
  AND j.state IN ('ready', 'delayed')
ORDER BY j.run_at, j.id
LIMIT %(limit)s
FOR UPDATE OF j SKIP LOCKED

-- name: drain_delete
-- x jobs drain: the rows drain_take locked, once the target acknowledged them (x_jobs_pkey; the
-- steps go with them, ON DELETE CASCADE). Nothing is counted: a moved job is not a settled one.
DELETE FROM {x_jobs} AS j
WHERE j.id = ANY(%(ids)s::uuid[])
  AND j.state IN ('ready', 'delayed')

-- name: drain_left
-- x jobs drain: what a drain of these queues leaves behind, per state (x_jobs_claim_idx,
-- x_jobs_lapsed_idx): running rows refuse the drain, suspended ones stay.
SELECT j.state, count(*)
FROM {x_jobs} j
WHERE j.queue = ANY(%(queues)s::text[])
  AND j.state IN ('running', 'suspended')
GROUP BY j.state
