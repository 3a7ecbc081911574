-- ultimat3.jobs, settle: ack, nack, heartbeats (one and many), and the step store's reads and writes.
-- The rules every statement file follows are at the top of common.sql.

-- name: ack
-- plan: generic
-- Fenced on (worker_id, claim) through x_jobs_pkey; the done counter moves in this statement.
WITH settled_rows AS (
    UPDATE {x_jobs} AS j SET
        state = 'done',
        result = %(result)s::jsonb,
        finished_at = now(),
        worker_id = NULL,
        claim = NULL,
        lease_expires_at = NULL,
        updated_at = now()
    WHERE j.id = %(id)s::uuid
      AND j.state = 'running'
      AND j.worker_id = %(worker_id)s
      AND j.claim = %(claim)s::uuid
    RETURNING j.name
),
settled AS (
    SELECT r.name AS job, 1 AS done, 0 AS retried, 0 AS failed, 0 AS dead,
           greatest(coalesce(%(duration_ms)s::bigint, 0), 0) AS duration_ms
    FROM settled_rows r
),
{count_settled}
SELECT count(*), (SELECT count(pg_notify({settle_channel}, %(id)s::text)) FROM settled_rows)
FROM settled_rows

-- name: ack_many
-- plan: generic
-- A batch of acks of one worker in one statement (x_jobs_pkey per input), the acks as one jsonb
-- array of [id, claim, result, duration_ms]; answers the ids that landed. The counters move once
-- per job name for the whole batch. Each landed ack notifies the settle channel with its id (a
-- job.result() waiter's wake; delivered at commit).
WITH input AS (
    SELECT (e.r ->> 0)::uuid AS id,
           (e.r ->> 1)::uuid AS claim,
           e.r -> 2 AS result,
           (e.r ->> 3)::bigint AS duration_ms
    FROM jsonb_array_elements(%(rows)s::jsonb) AS e (r)
),
settled_rows AS (
    UPDATE {x_jobs} AS j SET
        state = 'done',
        result = i.result,
        finished_at = now(),
        worker_id = NULL,
        claim = NULL,
        lease_expires_at = NULL,
        updated_at = now()
    FROM input i
    WHERE j.id = i.id
      AND j.state = 'running'
      AND j.worker_id = %(worker_id)s
      AND j.claim = i.claim
    RETURNING j.id, j.name, i.duration_ms
),
settled AS (
    SELECT r.name AS job, 1 AS done, 0 AS retried, 0 AS failed, 0 AS dead,
           greatest(coalesce(r.duration_ms, 0), 0) AS duration_ms
    FROM settled_rows r
),
{count_settled}
SELECT r.id::text, pg_notify({settle_channel}, r.id::text) FROM settled_rows r

-- name: nack
-- plan: generic
-- Fenced like ack. retry -> ready at run_at; dead / failed -> terminal; suspend -> suspended
-- (attempt handed back, wait_event kept for wake_waiters); release -> ready (attempt handed
-- back). retried / dead / failed move their counter in this statement; dead / failed notify the
-- settle channel (job.result() waiters).
WITH settled_rows AS (
    UPDATE {x_jobs} AS j SET
        state = CASE %(outcome)s::text
            WHEN 'retry' THEN 'ready'
            WHEN 'release' THEN 'ready'
            WHEN 'suspend' THEN 'suspended'
            ELSE %(outcome)s::text END,
        run_at = CASE WHEN %(outcome)s::text IN ('retry', 'suspend', 'release')
            THEN coalesce(
                to_timestamp(0) + %(run_at_ms)s::bigint * interval '1 millisecond',
                now() + greatest(coalesce(%(delay_ms)s::bigint, 0), 0) * interval '1 millisecond')
            ELSE j.run_at END,
        attempts = CASE WHEN %(outcome)s::text IN ('suspend', 'release')
            THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
        -- an attempt settled (retry, dead, failed): the crash streak ends, isolation with it
        crash_streak = CASE WHEN %(outcome)s::text IN ('suspend', 'release')
            THEN j.crash_streak ELSE 0 END,
        last_error = coalesce(%(error)s::jsonb, j.last_error),
        finished_at = CASE WHEN %(outcome)s::text IN ('dead', 'failed')
            THEN now() ELSE j.finished_at END,
        wait_event = CASE WHEN %(outcome)s::text = 'suspend'
            THEN %(wait_event)s::text ELSE j.wait_event END,
        worker_id = NULL,
        claim = NULL,
        lease_expires_at = NULL,
        updated_at = now()
    WHERE j.id = %(id)s::uuid
      AND j.state = 'running'
      AND j.worker_id = %(worker_id)s
      AND j.claim = %(claim)s::uuid
    RETURNING j.id, j.name
),
settled AS (
    SELECT r.name AS job, 0 AS done,
           (%(outcome)s::text = 'retry')::integer AS retried,
           (%(outcome)s::text = 'failed')::integer AS failed,
           (%(outcome)s::text = 'dead')::integer AS dead,
           0::bigint AS duration_ms
    FROM settled_rows r
    WHERE %(outcome)s::text IN ('retry', 'dead', 'failed')
),
{count_settled}
SELECT count(*), (SELECT count(pg_notify({settle_channel}, r.id::text)) FROM settled_rows r
                  WHERE %(outcome)s::text IN ('dead', 'failed'))
FROM settled_rows

-- name: heartbeat
-- plan: generic
UPDATE {x_jobs} AS j SET
    lease_expires_at = now() + %(visibility_timeout_ms)s::bigint * interval '1 millisecond',
    updated_at = now()
WHERE j.id = %(id)s::uuid
  AND j.state = 'running'
  AND j.worker_id = %(worker_id)s
  AND j.claim = %(claim)s::uuid

-- name: heartbeat_many
-- plan: generic
-- Renew every lease one worker holds in one statement; answers the ids that landed.
UPDATE {x_jobs} AS j SET
    lease_expires_at = now() + %(visibility_timeout_ms)s::bigint * interval '1 millisecond',
    updated_at = now()
FROM unnest(%(ids)s::uuid[], %(claims)s::uuid[]) AS i (id, claim)
WHERE j.id = i.id
  AND j.state = 'running'
  AND j.worker_id = %(worker_id)s
  AND j.claim = i.claim
RETURNING j.id::text

-- name: steps_load
-- plan: generic
-- x_job_steps_pkey; steps in the order they were first recorded.
SELECT s.name, s.state, s.executions, s.output, s.error, s.updated_at
FROM {x_job_steps} s
WHERE s.job_id = %(job_id)s::uuid
ORDER BY s.created_at, s.name

-- name: step_record
-- plan: generic
-- Fenced: the job row must still be held by (worker_id, claim); FOR SHARE keeps it held until
-- this statement commits. A completed step is never overwritten.
WITH owner AS (
    SELECT j.id
    FROM {x_jobs} j
    WHERE j.id = %(job_id)s::uuid
      AND j.state = 'running'
      AND j.worker_id = %(worker_id)s
      AND j.claim = %(claim)s::uuid
    FOR SHARE
),
written AS (
    INSERT INTO {x_job_steps} AS s
        (job_id, name, state, executions, output, error, created_at, updated_at)
    SELECT o.id, %(name)s, %(state)s, %(executions)s, %(output)s::jsonb, %(error)s::jsonb,
           now(), now()
    FROM owner o
    ON CONFLICT (job_id, name) DO UPDATE SET
        state = excluded.state,
        executions = s.executions + excluded.executions,
        output = excluded.output,
        error = excluded.error,
        updated_at = excluded.updated_at
    WHERE s.state <> 'completed'
    RETURNING 1
)
SELECT count(*) FROM written
