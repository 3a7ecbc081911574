-- ultimat3.jobs, claim: rows due now, in one statement; progress, queue stats, samples, waking waiters.
-- The rules every statement file follows are at the top of common.sql.

-- name: claim
-- plan: generic
-- Hand out at most %(limit)s due jobs, the queues served in turn (the first due row of each queue
-- in the order named, then the second of each, ...: one statement serves a worker's every queue
-- fairly, a queue's unused share going to the others). A claim that hands out fewer than its
-- limit also answers, as a row of kind 'next', the ms until the earliest row of its queues that
-- falls due later (one more ordered probe of x_jobs_claim_idx per queue): the worker's due timer. Served by x_jobs_claim_idx and x_jobs_lapsed_idx (one
-- ordered range scan of each per unpaused queue, LATERAL: ready rows by run_at, running rows
-- whose lease lapsed by lease_expires_at). Candidates
-- are locked (FOR UPDATE SKIP LOCKED) and MATERIALIZED before any UPDATE reads them, so the
-- statement can never hand out more than the limit; the UPDATEs address the locked ids through
-- x_jobs_pkey. A lapsed row on its final attempt is buried here (dead, or failed for the
-- no_dead_letter names) with X_JOB_LEASE_LOST, counted, and returned as kind 'buried'. Each
-- claimed row says whether it has steps (x_job_steps_pkey), so the run's first steps.load of a
-- step-less job costs no round trip. A lapse whose worker is known dead is a CRASH, not an
-- attempt (crashes.sql): never buried, re-offered with its attempt handed back and one more
-- crash on record; a lapse whose live worker still names the job in flight waits.
WITH queues AS (
    SELECT q.queue, min(q.ord) AS ord
    FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS q (queue, ord)
    WHERE NOT EXISTS (SELECT 1 FROM {x_paused_queues} p WHERE p.queue = q.queue)
    GROUP BY q.queue
),
due AS MATERIALIZED (
    SELECT d.id, d.run_at, queues.ord
    FROM queues
    CROSS JOIN LATERAL (
        SELECT j.id, j.run_at
        FROM {x_jobs} j
        WHERE j.queue = queues.queue
          AND j.state IN ('ready', 'delayed', 'suspended')
          AND j.run_at <= now()
        ORDER BY j.run_at, j.id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) d
),
lapsed AS MATERIALIZED (
    SELECT l.id, l.run_at, l.worker_id, l.crashed, l.progressed,
           NOT l.crashed AND l.spent AS exhausted, queues.ord
    FROM queues
    CROSS JOIN LATERAL (
        SELECT j.id, j.run_at, j.attempts >= j.max_attempts AS spent, j.worker_id,
               {lapse_crashed} AS crashed, {lapse_progressed} AS progressed
        FROM {x_jobs} j
        WHERE j.queue = queues.queue
          AND j.state = 'running'
          AND j.lease_expires_at <= now()
          AND NOT {lapse_deferred}
        ORDER BY j.lease_expires_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) l
),
picked AS MATERIALIZED (
    SELECT c.id
    FROM (
        SELECT id, run_at, ord FROM due
        UNION ALL
        SELECT id, run_at, ord FROM lapsed WHERE NOT exhausted
    ) c
    ORDER BY row_number() OVER (PARTITION BY c.ord ORDER BY c.run_at, c.id), c.ord
    LIMIT %(limit)s
),
next_due AS (
    SELECT min(n.run_at) AS run_at
    FROM queues
    CROSS JOIN LATERAL (
        SELECT j.run_at
        FROM {x_jobs} j
        WHERE j.queue = queues.queue
          AND j.state IN ('ready', 'delayed', 'suspended')
          AND j.run_at > now()
        ORDER BY j.run_at
        LIMIT 1
    ) n
    WHERE (SELECT count(*) FROM picked) < %(limit)s
),
claimed AS (
    UPDATE {x_jobs} AS j SET
        state = 'running',
        attempts = j.attempts + 1 - {crash_of_lapse},
        crashes = j.crashes + {crash_of_lapse},
        crash_streak = {streak_of_lapse},
        crashed_at = CASE WHEN {crash_of_lapse} = 1 THEN now() ELSE j.crashed_at END,
        worker_id = %(worker_id)s,
        claim = gen_random_uuid(),
        lease_expires_at = now() + %(visibility_timeout_ms)s::bigint * interval '1 millisecond',
        wait_event = NULL,
        updated_at = now()
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.run_id, j.name, j.queue, j.payload, j.attempts, j.max_attempts, j.claim,
              j.lease_expires_at, j.idempotency_key, j.tenant_id, j.concurrency_key,
              j.created_at, j.run_at, j.trace_context, j.crash_streak,
              (SELECT l.worker_id FROM lapsed l WHERE l.id = j.id AND l.crashed) AS crashed_worker
),
buried AS (
    UPDATE {x_jobs} AS j SET
        state = CASE WHEN j.name = ANY (%(no_dead_letter)s::text[]) THEN 'failed' ELSE 'dead' END,
        last_error = {lease_lost_error}::jsonb || jsonb_build_object(
            'message',
            'the lease lapsed on the final attempt (' || j.attempts || ' of ' || j.max_attempts
            || '): worker ' || coalesce(j.worker_id, '(unknown)')
            || ' stopped renewing it and no worker settled the run',
            'meta', jsonb_build_object(
                'attempts', j.attempts, 'max_attempts', j.max_attempts,
                'worker_id', j.worker_id)),
        finished_at = now(),
        worker_id = NULL,
        claim = NULL,
        lease_expires_at = NULL,
        wait_event = NULL,
        updated_at = now()
    WHERE j.id = ANY (ARRAY(SELECT id FROM lapsed WHERE exhausted))
    RETURNING j.id, j.name, j.queue, j.state, j.attempts, j.max_attempts, j.run_at,
              (SELECT l.worker_id FROM lapsed l WHERE l.id = j.id) AS lapsed_worker,
              j.run_id, j.payload, j.tenant_id, j.last_error
),
settled AS (
    SELECT b.name AS job, 0 AS done, 0 AS retried, (b.state = 'failed')::integer AS failed,
           (b.state = 'dead')::integer AS dead, 0::bigint AS duration_ms
    FROM buried b
),
{count_settled}
SELECT r.*
FROM (
    SELECT 'claimed' AS kind, c.id::text AS id, c.run_id::text AS run_id, c.name, c.queue,
           c.payload, c.attempts, c.max_attempts, c.claim::text AS claim,
           floor(extract(epoch FROM now()) * 1000)::bigint AS now_ms,
           floor(extract(epoch FROM c.lease_expires_at) * 1000)::bigint AS lease_ms,
           c.idempotency_key, c.tenant_id, c.concurrency_key,
           floor(extract(epoch FROM c.created_at) * 1000)::bigint AS created_ms,
           NULL::text AS state, NULL::text AS lapsed_worker, c.run_at,
           EXISTS (SELECT 1 FROM {x_job_steps} s WHERE s.job_id = c.id) AS has_steps,
           NULL::jsonb AS last_error, c.trace_context, c.crash_streak, c.crashed_worker
    FROM claimed c
    UNION ALL
    SELECT 'buried', b.id::text, b.run_id::text, b.name, b.queue, b.payload, b.attempts,
           b.max_attempts, NULL, NULL, NULL, NULL, b.tenant_id, NULL, NULL, b.state,
           b.lapsed_worker, b.run_at, NULL, b.last_error, NULL, NULL, NULL
    FROM buried b
    UNION ALL
    SELECT 'next', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
           ceil(extract(epoch FROM (n.run_at - now())) * 1000)::bigint, NULL, NULL, NULL, NULL,
           NULL, NULL, NULL, n.run_at, NULL, NULL, NULL, NULL, NULL
    FROM next_due n
    WHERE n.run_at IS NOT NULL
) r
ORDER BY r.kind, r.run_at, r.id

-- name: progress
-- plan: generic
UPDATE {x_jobs} AS j SET
    progress = %(progress)s::jsonb,
    updated_at = now()
WHERE j.id = %(id)s::uuid
  AND j.state = 'running'
  AND j.worker_id = %(worker_id)s
  AND j.claim = %(claim)s::uuid

-- name: wake_waiters
-- x_jobs_wait_event_idx; the woken queues are announced.
WITH woken AS (
    UPDATE {x_jobs} AS j SET
        run_at = least(j.run_at, now()),
        updated_at = now()
    WHERE j.state = 'suspended' AND j.wait_event = %(event)s
    RETURNING j.queue
),
announced AS (
    SELECT pg_notify({channel}, q.queue) FROM (SELECT DISTINCT queue FROM woken) q
)
SELECT (SELECT count(*) FROM woken), (SELECT count(*) FROM announced)

-- name: stats
SELECT j.queue,
       count(*) FILTER (WHERE j.state = 'ready'),
       count(*) FILTER (WHERE j.state = 'delayed'),
       count(*) FILTER (WHERE j.state = 'running'),
       count(*) FILTER (WHERE j.state = 'suspended'),
       count(*) FILTER (WHERE j.state = 'done'),
       count(*) FILTER (WHERE j.state = 'failed'),
       count(*) FILTER (WHERE j.state = 'dead'),
       count(*) FILTER (WHERE j.state = 'cancelled')
FROM {x_jobs} j
GROUP BY j.queue
ORDER BY j.queue

-- name: sample_queues
-- plan: generic
-- queue_depth / queue_demand (QueueSampler): for each queue named, in the order named, its due
-- rows no worker holds and its running rows, each counted up to %(cap)s by an index-only range
-- scan (x_jobs_claim_idx on (queue, run_at) for the due rows, x_jobs_lapsed_idx for the running
-- ones), and whether it is paused. One statement for every queue; it reads, never locks.
SELECT q.queue,
       (SELECT count(*)::integer FROM (
            SELECT 1 FROM {x_jobs} j
            WHERE j.queue = q.queue
              AND j.state IN ('ready', 'delayed', 'suspended')
              AND j.run_at <= now()
            LIMIT %(cap)s) d),
       (SELECT count(*)::integer FROM (
            SELECT 1 FROM {x_jobs} j
            WHERE j.queue = q.queue
              AND j.state = 'running'
            LIMIT %(cap)s) r),
       EXISTS (SELECT 1 FROM {x_paused_queues} p WHERE p.queue = q.queue)
FROM unnest(%(queues)s::text[]) WITH ORDINALITY AS q (queue, ord)
ORDER BY q.ord
