-- ultimat3.jobs, steps: the records of many runs' steps coalesced into one statement.
-- The rules every statement file follows are at the top of common.sql.

-- name: step_record_many
-- plan: generic
-- `step_record` for the steps of many runs recorded in the same event-loop turn, as one jsonb
-- array of [job_id, name, state, executions, [output] | null, [error] | null, worker_id, claim]
-- (a value wrapped in a one-element array, so SQL NULL and JSON null stay apart). Each row is
-- fenced like `step_record` (x_jobs_pkey, FOR SHARE until the commit); no (job_id, name) appears
-- twice in one array. Answers the (job_id, name) pairs that were written.
WITH input AS (
    SELECT (e.r ->> 0)::uuid AS job_id,
           e.r ->> 1 AS name,
           e.r ->> 2 AS state,
           (e.r ->> 3)::integer AS executions,
           e.r -> 4 -> 0 AS output,
           e.r -> 5 -> 0 AS error,
           e.r ->> 6 AS worker_id,
           (e.r ->> 7)::uuid AS claim
    FROM jsonb_array_elements(%(rows)s::jsonb) AS e (r)
),
owner AS (
    SELECT i.job_id, i.name, i.state, i.executions, i.output, i.error
    FROM input i
    JOIN {x_jobs} j ON j.id = i.job_id
    WHERE j.state = 'running'
      AND j.worker_id = i.worker_id
      AND j.claim = i.claim
    FOR SHARE OF j
),
written AS (
    INSERT INTO {x_job_steps} AS s
        (job_id, name, state, executions, output, error, created_at, updated_at)
    SELECT o.job_id, o.name, o.state, o.executions, o.output, o.error, now(), now()
    FROM owner o
    ON CONFLICT (job_id, name) DO UPDATE SET
        state = excluded.state,
        executions = s.executions + excluded.executions,
        output = excluded.output,
        error = excluded.error,
        updated_at = excluded.updated_at
    WHERE s.state <> 'completed'
    RETURNING s.job_id, s.name
)
SELECT w.job_id::text, w.name FROM written w
