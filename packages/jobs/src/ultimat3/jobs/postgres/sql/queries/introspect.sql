-- ultimat3.jobs, introspection: show, list, remove, requeue, cancel, promote, pauses, purge.
-- The rules every statement file follows are at the top of common.sql.

-- name: show
-- x_jobs_pkey + x_job_steps_pkey: the row and its steps, read in one snapshot.
SELECT {job_columns}, s.name, s.state, s.executions, s.output, s.error, s.updated_at
FROM {x_jobs} j
LEFT JOIN {x_job_steps} s ON s.job_id = j.id
WHERE j.id = %(id)s::uuid
ORDER BY s.created_at, s.name

-- name: list_after
-- Newest first: x_jobs_created_idx scanned backwards from the cursor (or from the top).
SELECT {job_columns}
FROM {x_jobs} j
WHERE (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (%(name)s::text IS NULL OR j.name = %(name)s::text)
  AND (%(state)s::text IS NULL OR j.state = %(state)s::text)
  AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s::text)
  AND (%(id_prefix)s::text IS NULL OR starts_with(j.id::text, %(id_prefix)s::text))
  AND (%(created_from)s::timestamptz IS NULL OR j.created_at >= %(created_from)s::timestamptz)
  AND (%(created_to)s::timestamptz IS NULL OR j.created_at <= %(created_to)s::timestamptz)
  AND (%(cursor_at)s::timestamptz IS NULL
       OR (j.created_at, j.id) < (%(cursor_at)s::timestamptz, %(cursor_id)s::uuid))
ORDER BY j.created_at DESC, j.id DESC
LIMIT %(limit)s

-- name: list_before
-- The page before a cursor: x_jobs_created_idx scanned forwards; the driver reverses it.
SELECT {job_columns}
FROM {x_jobs} j
WHERE (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
  AND (%(name)s::text IS NULL OR j.name = %(name)s::text)
  AND (%(state)s::text IS NULL OR j.state = %(state)s::text)
  AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s::text)
  AND (%(id_prefix)s::text IS NULL OR starts_with(j.id::text, %(id_prefix)s::text))
  AND (%(created_from)s::timestamptz IS NULL OR j.created_at >= %(created_from)s::timestamptz)
  AND (%(created_to)s::timestamptz IS NULL OR j.created_at <= %(created_to)s::timestamptz)
  AND (j.created_at, j.id) > (%(cursor_at)s::timestamptz, %(cursor_id)s::uuid)
ORDER BY j.created_at, j.id
LIMIT %(limit)s

-- name: job_state
SELECT j.state, j.run_at > now() FROM {x_jobs} j WHERE j.id = %(id)s::uuid

-- name: remove
-- Deletes the row unless it is running (its steps go with it: ON DELETE CASCADE). Answers the
-- state it found (none: no such job).
WITH target AS (
    SELECT j.id, j.state FROM {x_jobs} j WHERE j.id = %(id)s::uuid FOR UPDATE
),
deleted AS (
    DELETE FROM {x_jobs} AS j
    WHERE j.id = (SELECT t.id FROM target t WHERE t.state <> 'running')
    RETURNING 1
)
SELECT t.state, (SELECT count(*) FROM deleted) FROM target t

-- name: remove_many
-- Up to %(limit)s rows in one state, oldest first (x_jobs_created_idx); answers what it
-- deleted and how many matching rows are left.
WITH doomed AS MATERIALIZED (
    SELECT j.id
    FROM {x_jobs} j
    WHERE j.state = %(state)s::text
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(name)s::text IS NULL OR j.name = %(name)s::text)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s::text)
    ORDER BY j.created_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM {x_jobs} AS j WHERE j.id = ANY (ARRAY(SELECT id FROM doomed)) RETURNING 1
),
matching AS (
    SELECT count(*) AS n
    FROM {x_jobs} j
    WHERE j.state = %(state)s::text
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(name)s::text IS NULL OR j.name = %(name)s::text)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s::text)
)
SELECT (SELECT count(*) FROM deleted), (SELECT n FROM matching) - (SELECT count(*) FROM deleted)

-- name: requeue_lock
-- requeue, in one transaction: lock the row, name a live holder of its key
-- (x_jobs_name_tenant_idempotency_live_idx).
SELECT j.state,
       (SELECT l.id::text
        FROM {x_jobs} l
        WHERE l.name = j.name
          AND coalesce(l.tenant_id, '') = coalesce(j.tenant_id, '')
          AND l.idempotency_key = j.idempotency_key
          AND l.state IN ('ready', 'delayed', 'running', 'suspended')
          AND l.id <> j.id
        LIMIT 1),
       j.idempotency_key, j.name
FROM {x_jobs} j
WHERE j.id = %(id)s::uuid
FOR UPDATE OF j

-- name: requeue_step_names
SELECT s.name FROM {x_job_steps} s WHERE s.job_id = %(id)s::uuid ORDER BY s.created_at, s.name

-- name: requeue_drop_steps
DELETE FROM {x_job_steps} AS s WHERE s.job_id = %(id)s::uuid AND s.name = ANY (%(names)s::text[])

-- name: requeue_move
WITH moved AS (
    UPDATE {x_jobs} AS j SET
        state = 'ready',
        attempts = 0,
        run_at = now(),
        finished_at = NULL,
        result = NULL,
        wait_event = NULL,
        worker_id = NULL,
        claim = NULL,
        lease_expires_at = NULL,
        updated_at = now()
    WHERE j.id = %(id)s::uuid
    RETURNING {job_columns}
),
announced AS (
    SELECT pg_notify({channel}, m.queue) FROM moved m
)
SELECT m.*, (SELECT count(*) FROM announced) FROM moved m

-- name: requeue_many
-- Up to %(limit)s finished rows back to ready, the oldest row of each key first; a key a live
-- job holds stays (x_jobs_name_tenant_idempotency_live_idx) and is not counted as remaining.
WITH movable AS MATERIALIZED (
    SELECT DISTINCT ON (j.name, coalesce(j.tenant_id, ''), j.idempotency_key)
           j.id, j.created_at
    FROM {x_jobs} j
    WHERE j.state = %(state)s::text
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(name)s::text IS NULL OR j.name = %(name)s::text)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s::text)
      AND NOT EXISTS (
          SELECT 1 FROM {x_jobs} l
          WHERE l.name = j.name
            AND coalesce(l.tenant_id, '') = coalesce(j.tenant_id, '')
            AND l.idempotency_key = j.idempotency_key
            AND l.state IN ('ready', 'delayed', 'running', 'suspended'))
    ORDER BY j.name, coalesce(j.tenant_id, ''), j.idempotency_key, j.created_at, j.id
),
picked AS MATERIALIZED (
    SELECT j.id
    FROM {x_jobs} j
    WHERE j.id = ANY (ARRAY(
            SELECT m.id FROM movable m ORDER BY m.created_at, m.id LIMIT %(limit)s))
      AND j.state = %(state)s::text
    FOR UPDATE SKIP LOCKED
),
moved AS (
    UPDATE {x_jobs} AS j SET
        state = 'ready',
        attempts = 0,
        run_at = now(),
        finished_at = NULL,
        result = NULL,
        wait_event = NULL,
        worker_id = NULL,
        claim = NULL,
        lease_expires_at = NULL,
        updated_at = now()
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING j.queue
),
announced AS (
    SELECT pg_notify({channel}, q.queue) FROM (SELECT DISTINCT queue FROM moved) q
)
SELECT (SELECT count(*) FROM moved),
       (SELECT count(*) FROM movable) - (SELECT count(*) FROM moved),
       (SELECT count(*) FROM announced)

-- name: cancel
-- A live row only (x_jobs_pkey); its claim is void, so the holder's settles answer False.
UPDATE {x_jobs} AS j SET
    state = 'cancelled',
    last_error = %(error)s::jsonb,
    finished_at = now(),
    wait_event = NULL,
    worker_id = NULL,
    claim = NULL,
    lease_expires_at = NULL,
    updated_at = now()
WHERE j.id = %(id)s::uuid
  AND j.state IN ('ready', 'delayed', 'running', 'suspended')
RETURNING {job_columns}

-- name: cancel_many
-- Up to %(limit)s live rows in one state, oldest first, cancelled as `cancel` does; answers what
-- it cancelled and how many matching rows are left.
WITH doomed AS MATERIALIZED (
    SELECT j.id
    FROM {x_jobs} j
    WHERE j.state = %(state)s::text
      AND j.state IN ('ready', 'delayed', 'running', 'suspended')
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(name)s::text IS NULL OR j.name = %(name)s::text)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s::text)
    ORDER BY j.created_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
cancelled AS (
    UPDATE {x_jobs} AS j SET
        state = 'cancelled',
        last_error = %(error)s::jsonb,
        finished_at = now(),
        wait_event = NULL,
        worker_id = NULL,
        claim = NULL,
        lease_expires_at = NULL,
        updated_at = now()
    WHERE j.id = ANY (ARRAY(SELECT id FROM doomed))
    RETURNING 1
),
matching AS (
    SELECT count(*) AS n
    FROM {x_jobs} j
    WHERE j.state = %(state)s::text
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(name)s::text IS NULL OR j.name = %(name)s::text)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s::text)
)
SELECT (SELECT count(*) FROM cancelled), (SELECT n FROM matching) - (SELECT count(*) FROM cancelled)

-- name: promote
-- A row waiting on its run_at (delayed, or ready backing off) becomes due now.
WITH moved AS (
    UPDATE {x_jobs} AS j SET
        state = 'ready',
        run_at = now(),
        updated_at = now()
    WHERE j.id = %(id)s::uuid
      AND (j.state = 'delayed' OR (j.state = 'ready' AND j.run_at > now()))
    RETURNING {job_columns}
),
announced AS (
    SELECT pg_notify({channel}, m.queue) FROM moved m
)
SELECT m.*, (SELECT count(*) FROM announced) FROM moved m

-- name: promote_many
WITH picked AS MATERIALIZED (
    SELECT j.id
    FROM {x_jobs} j
    WHERE j.state = %(state)s::text
      AND (j.state = 'delayed' OR j.run_at > now())
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(name)s::text IS NULL OR j.name = %(name)s::text)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s::text)
    ORDER BY j.created_at, j.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
moved AS (
    UPDATE {x_jobs} AS j SET
        state = 'ready',
        run_at = now(),
        updated_at = now()
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING j.queue
),
announced AS (
    SELECT pg_notify({channel}, q.queue) FROM (SELECT DISTINCT queue FROM moved) q
),
matching AS (
    SELECT count(*) AS n
    FROM {x_jobs} j
    WHERE j.state = %(state)s::text
      AND (j.state = 'delayed' OR j.run_at > now())
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
      AND (%(name)s::text IS NULL OR j.name = %(name)s::text)
      AND (%(tenant_id)s::text IS NULL OR j.tenant_id = %(tenant_id)s::text)
)
SELECT (SELECT count(*) FROM moved),
       (SELECT n FROM matching) - (SELECT count(*) FROM moved),
       (SELECT count(*) FROM announced)

-- name: resolve_step_lock
SELECT j.state,
       (SELECT s.state FROM {x_job_steps} s WHERE s.job_id = j.id AND s.name = %(step)s)
FROM {x_jobs} j
WHERE j.id = %(id)s::uuid
FOR UPDATE OF j

-- name: resolve_step_forget
DELETE FROM {x_job_steps} AS s WHERE s.job_id = %(id)s::uuid AND s.name = %(step)s

-- name: resolve_step_ran
UPDATE {x_job_steps} AS s SET
    state = 'completed',
    executions = s.executions + 1,
    output = %(output)s::jsonb,
    error = NULL,
    updated_at = now()
WHERE s.job_id = %(id)s::uuid AND s.name = %(step)s
RETURNING s.name, s.state, s.executions, s.output, s.error, s.updated_at

-- name: pause_queue
INSERT INTO {x_paused_queues} (queue, paused_at) VALUES (%(queue)s, now())
ON CONFLICT (queue) DO NOTHING

-- name: resume_queue
-- The claim reads x_paused_queues itself; a resume announces the queue.
WITH resumed AS (
    DELETE FROM {x_paused_queues} AS p WHERE p.queue = %(queue)s RETURNING p.queue
)
SELECT count(pg_notify({channel}, r.queue)) FROM resumed r

-- name: paused_queues
SELECT p.queue FROM {x_paused_queues} p ORDER BY p.queue

-- name: purge_jobs
-- One batch of terminal rows past their retention. x_jobs_created_idx narrows the scan: a row
-- finished before the cut-off was created before it too.
WITH doomed AS MATERIALIZED (
    SELECT j.id
    FROM {x_jobs} j
    WHERE j.created_at <= now() - least(%(done_ms)s::bigint, %(dead_ms)s::bigint)
                                  * interval '1 millisecond'
      AND j.state IN ('done', 'failed', 'dead', 'cancelled')
      AND coalesce(j.finished_at, j.updated_at)
          <= now() - (CASE WHEN j.state = 'done' THEN %(done_ms)s::bigint
                           ELSE %(dead_ms)s::bigint END) * interval '1 millisecond'
    ORDER BY j.created_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {x_jobs} AS j WHERE j.id = ANY (ARRAY(SELECT id FROM doomed))

-- name: purge_workers
DELETE FROM {x_workers} AS w
WHERE w.last_heartbeat_at + w.visibility_timeout_ms * interval '1 millisecond' <= now()

-- name: purge_leases
DELETE FROM {x_job_leases} AS l WHERE l.expires_at <= now()

-- name: purge_counters
-- Each tier keeps its buckets for its own retention.
DELETE FROM {x_job_counters} AS c
USING unnest({counter_bucket_ms}::integer[], {counter_kept_ms}::bigint[]) AS t (bucket_ms, kept_ms)
WHERE c.bucket_ms = t.bucket_ms
  AND c.bucket_start + t.bucket_ms * interval '1 millisecond'
      <= now() - t.kept_ms * interval '1 millisecond'
