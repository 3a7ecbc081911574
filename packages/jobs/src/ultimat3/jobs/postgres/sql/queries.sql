-- ultimat3.jobs: every statement the Postgres driver sends. SQL lives nowhere else.
--
-- Each block starts with `-- name: <name>`. Placeholders in braces are filled once per driver by
-- _sql.py: `{x_jobs}` and the other tables become schema-qualified, quoted identifiers
-- (psycopg.sql.Identifier, never spliced text); `{channel}`, `{lease_tokens}`,
-- `{counter_bucket_ms}`, `{counter_kept_ms}`, `{counter_tiers}` and `{lease_lost_error}` become
-- literals; a block named in braces (`{job_columns}`, `{count_settled}`) is pasted in as a
-- fragment. Parameters are psycopg's `%(name)s`.
--
-- Times come from the database clock only: now() (the statement's transaction start; every
-- driver statement runs in autocommit unless the caller's transaction is joined). Epoch
-- milliseconds cross the wire as bigint: `to_timestamp(0) + ms * interval '1 millisecond'` in,
-- `floor(extract(epoch FROM t) * 1000)::bigint` out.

-- name: job_columns
-- (fragment) a JobRow, in _rows.job_row's order, from `x_jobs AS j`.
j.id::text, j.run_id::text, j.name, j.queue, j.state, j.attempts, j.max_attempts, j.run_at,
j.created_at, j.updated_at, j.idempotency_key, j.payload, j.tenant_id, j.concurrency_key,
j.last_error, j.progress, j.result, j.worker_id, j.lease_expires_at, j.finished_at

-- name: count_settled
-- (fragment) the counters move in the settling statement: upsert one bucket per tier for the
-- rows of a CTE `settled(job, done, retried, failed, dead, duration_ms)`. The shard spreads
-- concurrent settles of one job over rows; the ORDER BY keeps the lock order fixed.
counted AS (
    INSERT INTO {x_job_counters} AS c
        (job, bucket_ms, bucket_start, shard, done, retried, failed, dead, duration_ms)
    SELECT s.job,
           t.bucket_ms,
           date_bin(t.bucket_ms * interval '1 millisecond', now(), to_timestamp(0)),
           mod(pg_backend_pid(), 8),
           sum(s.done), sum(s.retried), sum(s.failed), sum(s.dead), sum(s.duration_ms)
    FROM settled s
    CROSS JOIN unnest({counter_bucket_ms}::integer[]) AS t (bucket_ms)
    GROUP BY s.job, t.bucket_ms
    ORDER BY s.job, t.bucket_ms
    ON CONFLICT (job, bucket_ms, bucket_start, shard) DO UPDATE SET
        done = c.done + excluded.done,
        retried = c.retried + excluded.retried,
        failed = c.failed + excluded.failed,
        dead = c.dead + excluded.dead,
        duration_ms = c.duration_ms + excluded.duration_ms
)

-- name: now_ms
SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint

-- name: enqueue_insert
-- (fragment) one job's row, new and waiting; `enqueue` and `enqueue_blind` add their conflict
-- handling and `enqueue_returning`.
INSERT INTO {x_jobs} (
    id, run_id, name, queue, state, payload, idempotency_key, tenant_id, concurrency_key,
    attempts, max_attempts, run_at, created_at, updated_at, trace_context)
SELECT %(id)s::uuid, %(run_id)s::uuid, %(name)s, %(queue)s,
       CASE WHEN input.run_at > now() THEN 'delayed' ELSE 'ready' END,
       %(payload)s::jsonb, %(idempotency_key)s, %(tenant_id)s, %(concurrency_key)s,
       0, %(max_attempts)s, input.run_at, now(), now(), %(trace_context)s::jsonb
FROM (
    SELECT coalesce(
        to_timestamp(0) + %(run_at_ms)s::bigint * interval '1 millisecond',
        now() + greatest(coalesce(%(delay_ms)s::bigint, 0), 0) * interval '1 millisecond'
    ) AS run_at
) input

-- name: enqueue_returning
-- (fragment) the inserted row's id and run id; the notify rides it for a ready row:
-- transactional, delivered at commit, never on a rollback.
RETURNING id::text, run_id::text,
          CASE WHEN %(notify)s AND state = 'ready' THEN pg_notify({channel}, queue) END

-- name: enqueue
-- One job, one statement: a plain INSERT ... ON CONFLICT DO NOTHING, which covers both the live
-- key (x_jobs_name_tenant_idempotency_live_idx) and a republished id (x_jobs_pkey). Nothing
-- returned: the key or the id is held, and the driver reads the row that won with
-- `enqueue_holder`. No CTE and no second branch: the executor's cost of those was ~40 of ~90 us
-- per enqueue (EXPLAIN ANALYZE, docs/performance.md). Sent inside the caller's transaction, and
-- on the pool for a job whose enqueues met a live key lately.
{enqueue_insert}
ON CONFLICT DO NOTHING
{enqueue_returning}

-- name: enqueue_blind
-- One job on a pool connection (autocommit), for a job whose enqueues met no live key lately:
-- the INSERT without ON CONFLICT (no speculative insertion: ~10 us less execution and one WAL
-- record fewer). A key or id already taken fails it with a unique violation, having changed
-- nothing; the driver then sends `enqueue` and, for a while, sends that job's enqueues so
-- (_enqueue.Enqueuer.met_live, as for `enqueue_many_blind`).
{enqueue_insert}
{enqueue_returning}

-- name: enqueue_holder
-- After `enqueue` inserted nothing: the row that won, the live holder of the key first
-- (x_jobs_name_tenant_idempotency_live_idx), then the row with the same id (x_jobs_pkey). No
-- row: the holder finished (or committed after this transaction's snapshot) in between, and the
-- driver sends `enqueue` again.
SELECT j.id::text, j.run_id::text
FROM {x_jobs} j
WHERE j.id = %(id)s::uuid
   OR (j.name = %(name)s
       AND coalesce(j.tenant_id, '') = coalesce(%(tenant_id)s, '')
       AND j.idempotency_key = %(idempotency_key)s
       AND j.state IN ('ready', 'delayed', 'running', 'suspended'))
ORDER BY j.id = %(id)s::uuid
LIMIT 1

-- name: enqueue_many_input
-- (fragment) up to ENQUEUE_CHUNK requests (deduplicated by key and id in Python first) as typed
-- arrays, one per column, zipped by ROWS FROM in input order (`ord`): no per-row JSON to take
-- apart. _enqueue.chunk_params writes each as one array literal (joined in C on the client);
-- the payloads are ONE json array (one json.dumps, one parse). A column that is NULL
-- throughout (no tenants, no trace contexts) is sent as a NULL array: ROWS FROM pads it with
-- NULLs. A trace context is jsonb text or NULL.
input AS (
    SELECT i.*,
           coalesce(
               to_timestamp(0) + i.run_at_ms * interval '1 millisecond',
               now() + greatest(coalesce(i.delay_ms, 0), 0) * interval '1 millisecond'
           ) AS run_at
    FROM ROWS FROM (
        unnest(%(ids)s::uuid[]),
        unnest(%(run_ids)s::uuid[]),
        unnest(%(names)s::text[]),
        unnest(%(queues)s::text[]),
        jsonb_array_elements(%(payloads)s::jsonb),
        unnest(%(idempotency_keys)s::text[]),
        unnest(%(tenant_ids)s::text[]),
        unnest(%(concurrency_keys)s::text[]),
        unnest(%(max_attempts)s::integer[]),
        unnest(%(run_at_ms)s::bigint[]),
        unnest(%(delay_ms)s::bigint[]),
        unnest(%(trace_contexts)s::jsonb[])
    ) WITH ORDINALITY AS i (
        id, run_id, name, queue, payload, idempotency_key, tenant_id, concurrency_key,
        max_attempts, run_at_ms, delay_ms, trace_context, ord)
)

-- name: enqueue_many_summary
-- (fragment) after an `inserted` CTE: the notify (one per queue with a ready row inserted, when
-- %(notify)s), then ONE summary row (ord 0): how many rows were inserted, how many notified.
woken AS (
    SELECT pg_notify({channel}, q.queue)
    FROM (SELECT DISTINCT i.queue FROM inserted i WHERE i.state = 'ready') q
    WHERE %(notify)s
)
SELECT 0::bigint, NULL::text, NULL::text, (SELECT count(*) FROM inserted),
       (SELECT count(*) FROM woken), NULL::boolean

-- name: enqueue_many_answer
-- (fragment) `enqueue_many_summary`, then one row per input NOT inserted: the row that won its
-- key or id (x_jobs_name_tenant_idempotency_live_idx, x_jobs_pkey) and whether it holds the
-- input's live key, or NULLs when the winner committed after this statement's snapshot.
-- Inserted inputs answer nothing: the caller knows their ids.
{enqueue_many_summary}
UNION ALL
SELECT i.ord, won.id::text, won.run_id::text, NULL, NULL, won.holds_key
FROM input i
LEFT JOIN inserted ins ON ins.id = i.id
LEFT JOIN LATERAL (
    SELECT j.id, j.run_id,
           j.name = i.name
           AND coalesce(j.tenant_id, '') = coalesce(i.tenant_id, '')
           AND j.idempotency_key = i.idempotency_key
           AND j.state IN ('ready', 'delayed', 'running', 'suspended') AS holds_key
    FROM {x_jobs} j
    WHERE j.id = i.id
       OR (j.name = i.name
           AND coalesce(j.tenant_id, '') = coalesce(i.tenant_id, '')
           AND j.idempotency_key = i.idempotency_key
           AND j.state IN ('ready', 'delayed', 'running', 'suspended'))
    ORDER BY j.id = i.id  -- the live holder of the key first, then the same id
    LIMIT 1
) won ON true
WHERE ins.id IS NULL

-- name: enqueue_many_insert
-- (fragment) the INSERT of the `input` rows (`enqueue_many_input`), new and waiting; each
-- statement adds its filter, the key order and its conflict handling. Rows go in in key order,
-- so two batches racing on overlapping keys wait on each other in one order, never deadlock.
INSERT INTO {x_jobs} (
        id, run_id, name, queue, state, payload, idempotency_key, tenant_id, concurrency_key,
        attempts, max_attempts, run_at, created_at, updated_at, trace_context)
    SELECT i.id, i.run_id, i.name, i.queue,
           CASE WHEN i.run_at > now() THEN 'delayed' ELSE 'ready' END,
           i.payload, i.idempotency_key, i.tenant_id, i.concurrency_key,
           0, i.max_attempts, i.run_at, now(), now(), i.trace_context
    FROM input i

-- name: enqueue_many_blind
-- enqueue_many on a pool connection (autocommit) of a job whose recent batches met no live key
-- (the common case: new keys): the plain INSERT alone, without the probe. A key or id already
-- taken fails the whole statement with a unique violation, which changed nothing (the rows
-- written before it are dead tuples for vacuum); the driver then sends `enqueue_many` and, for
-- a while, probes that job's batches first (`enqueue_many_fresh`; _enqueue.Enqueuer.met_live).
-- Every input was inserted, or none was: the answer is the summary row alone. Leaving out the
-- probe saves ~2.3 ms of the ~11 ms the server spends per 1,000 rows (docs/performance.md).
WITH {enqueue_many_input},
inserted AS (
    {enqueue_many_insert}
    ORDER BY i.name, coalesce(i.tenant_id, ''), i.idempotency_key
    RETURNING id, queue, state
),
{enqueue_many_summary}

-- name: enqueue_many_fresh
-- enqueue_many on a pool connection (autocommit), optimistic: a live key already held is
-- filtered out by a probe of x_jobs_name_tenant_idempotency_live_idx, and the rest is a plain
-- INSERT (no speculative insertion: about a third cheaper than ON CONFLICT). A key or id taken
-- meanwhile fails the whole statement with a unique violation, which changed nothing; the driver
-- then sends `enqueue_many`. Sent for a job whose batches met a live key lately (else
-- `enqueue_many_blind`, without the probe). The probe's OFFSET 0 keeps it a subplan,
-- one index lookup per input: pulled up into an anti-join, the planner may hash EVERY live row
-- of the table first (7 ms per call at 16,000 live rows, growing with the backlog).
WITH {enqueue_many_input},
inserted AS (
    {enqueue_many_insert}
    WHERE NOT EXISTS (
        SELECT 1 FROM {x_jobs} j
        WHERE j.name = i.name
          AND coalesce(j.tenant_id, '') = coalesce(i.tenant_id, '')
          AND j.idempotency_key = i.idempotency_key
          AND j.state IN ('ready', 'delayed', 'running', 'suspended')
        OFFSET 0)
    ORDER BY i.name, coalesce(i.tenant_id, ''), i.idempotency_key
    RETURNING id, queue, state
),
{enqueue_many_answer}

-- name: enqueue_many
-- enqueue_many inside the caller's transaction (or after a statement above met a conflict):
-- INSERT ... ON CONFLICT DO NOTHING on the live key and the id, so a conflict never aborts the
-- transaction. Key order, as above.
WITH {enqueue_many_input},
inserted AS (
    {enqueue_many_insert}
    ORDER BY i.name, coalesce(i.tenant_id, ''), i.idempotency_key
    ON CONFLICT DO NOTHING
    RETURNING id, queue, state
),
{enqueue_many_answer}

-- name: claim
-- Hand out at most %(limit)s due jobs. Served by x_jobs_claim_idx and x_jobs_lapsed_idx (one
-- ordered range scan of each per unpaused queue, LATERAL: ready rows by run_at, running rows
-- whose lease lapsed by lease_expires_at). Candidates
-- are locked (FOR UPDATE SKIP LOCKED) and MATERIALIZED before any UPDATE reads them, so the
-- statement can never hand out more than the limit; the UPDATEs address the locked ids through
-- x_jobs_pkey. A lapsed row on its final attempt is buried here (dead, or failed for the
-- no_dead_letter names) with X_JOB_LEASE_LOST, counted, and returned as kind 'buried'. Each
-- claimed row says whether it has steps (x_job_steps_pkey), so the run's first steps.load of a
-- step-less job costs no round trip.
WITH queues AS (
    SELECT DISTINCT q.queue
    FROM unnest(%(queues)s::text[]) AS q (queue)
    WHERE NOT EXISTS (SELECT 1 FROM {x_paused_queues} p WHERE p.queue = q.queue)
),
due AS MATERIALIZED (
    SELECT d.id, d.run_at
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
    SELECT l.id, l.run_at, l.exhausted, l.worker_id
    FROM queues
    CROSS JOIN LATERAL (
        SELECT j.id, j.run_at, j.attempts >= j.max_attempts AS exhausted, j.worker_id
        FROM {x_jobs} j
        WHERE j.queue = queues.queue
          AND j.state = 'running'
          AND j.lease_expires_at <= now()
        ORDER BY j.lease_expires_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) l
),
picked AS MATERIALIZED (
    SELECT c.id
    FROM (
        SELECT id, run_at FROM due
        UNION ALL
        SELECT id, run_at FROM lapsed WHERE NOT exhausted
    ) c
    ORDER BY c.run_at, c.id
    LIMIT %(limit)s
),
claimed AS (
    UPDATE {x_jobs} AS j SET
        state = 'running',
        attempts = j.attempts + 1,
        worker_id = %(worker_id)s,
        claim = gen_random_uuid(),
        lease_expires_at = now() + %(visibility_timeout_ms)s::bigint * interval '1 millisecond',
        wait_event = NULL,
        updated_at = now()
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.run_id, j.name, j.queue, j.payload, j.attempts, j.max_attempts, j.claim,
              j.lease_expires_at, j.idempotency_key, j.tenant_id, j.concurrency_key,
              j.created_at, j.run_at, j.trace_context
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
           NULL::jsonb AS last_error, c.trace_context
    FROM claimed c
    UNION ALL
    SELECT 'buried', b.id::text, b.run_id::text, b.name, b.queue, b.payload, b.attempts,
           b.max_attempts, NULL, NULL, NULL, NULL, b.tenant_id, NULL, NULL, b.state,
           b.lapsed_worker, b.run_at, NULL, b.last_error, NULL
    FROM buried b
) r
ORDER BY r.kind, r.run_at, r.id

-- name: ack
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
SELECT count(*) FROM settled_rows

-- name: ack_many
-- A batch of acks of one worker in one statement (x_jobs_pkey per input), the acks as one jsonb
-- array of [id, claim, result, duration_ms]; answers the ids that landed. The counters move once
-- per job name for the whole batch.
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
SELECT r.id::text FROM settled_rows r

-- name: nack
-- Fenced like ack. retry -> ready at run_at; dead / failed -> terminal; suspend -> suspended
-- (attempt handed back, wait_event kept for wake_waiters); release -> ready (attempt handed
-- back). retried / dead / failed move their counter in this statement.
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
    RETURNING j.name
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
SELECT count(*) FROM settled_rows

-- name: heartbeat
UPDATE {x_jobs} AS j SET
    lease_expires_at = now() + %(visibility_timeout_ms)s::bigint * interval '1 millisecond',
    updated_at = now()
WHERE j.id = %(id)s::uuid
  AND j.state = 'running'
  AND j.worker_id = %(worker_id)s
  AND j.claim = %(claim)s::uuid

-- name: heartbeat_many
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

-- name: progress
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

-- name: steps_load
-- x_job_steps_pkey; steps in the order they were first recorded.
SELECT s.name, s.state, s.executions, s.output, s.error, s.updated_at
FROM {x_job_steps} s
WHERE s.job_id = %(job_id)s::uuid
ORDER BY s.created_at, s.name

-- name: step_record
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

-- name: lease_acquire
-- x_job_leases_pkey. The holder's own unexpired slot comes back renewed; else the lowest slot
-- below the limit that is free or expired. Two workers reaching for one slot meet on the
-- primary key: the loser's ON CONFLICT sees the slot taken and grants nothing (it asks again).
-- Every grant takes a new token from x_job_lease_tokens.
WITH mine AS (
    SELECT l.slot
    FROM {x_job_leases} l
    WHERE l.lease_key = %(key)s AND l.holder = %(holder)s
      AND l.slot < %(limit)s AND l.expires_at > now()
    ORDER BY l.slot
    LIMIT 1
),
choice AS (
    SELECT coalesce(
        (SELECT slot FROM mine),
        (SELECT s.slot
         FROM generate_series(0, %(limit)s - 1) AS s (slot)
         WHERE NOT EXISTS (
             SELECT 1 FROM {x_job_leases} l
             WHERE l.lease_key = %(key)s AND l.slot = s.slot AND l.expires_at > now())
         ORDER BY s.slot
         LIMIT 1)
    ) AS slot
),
granted AS (
    INSERT INTO {x_job_leases} AS l (lease_key, slot, holder, token, expires_at)
    SELECT %(key)s, c.slot, %(holder)s, nextval({lease_tokens}),
           now() + %(ttl_ms)s::bigint * interval '1 millisecond'
    FROM choice c
    WHERE c.slot IS NOT NULL
    ON CONFLICT (lease_key, slot) DO UPDATE SET
        holder = excluded.holder,
        token = excluded.token,
        expires_at = excluded.expires_at
    WHERE l.expires_at <= now() OR l.holder = excluded.holder
    RETURNING l.slot, l.token, floor(extract(epoch FROM l.expires_at) * 1000)::bigint
)
SELECT g.slot, g.token, g.expires_ms, c.slot
FROM choice c
LEFT JOIN granted AS g (slot, token, expires_ms) ON true

-- name: lease_renew
UPDATE {x_job_leases} AS l SET
    expires_at = now() + %(ttl_ms)s::bigint * interval '1 millisecond'
WHERE l.lease_key = %(key)s AND l.slot = %(slot)s AND l.holder = %(holder)s
  AND l.expires_at > now()

-- name: lease_release
DELETE FROM {x_job_leases} AS l
WHERE l.lease_key = %(key)s AND l.slot = %(slot)s AND l.holder = %(holder)s

-- name: lease_holders
SELECT l.slot, l.holder, l.token, floor(extract(epoch FROM l.expires_at) * 1000)::bigint
FROM {x_job_leases} l
WHERE l.lease_key = %(key)s AND l.expires_at > now()
ORDER BY l.slot

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

-- name: pause_task
INSERT INTO {x_paused_tasks} (task, paused_at) VALUES (%(task)s, now())
ON CONFLICT (task) DO NOTHING

-- name: resume_task
DELETE FROM {x_paused_tasks} AS p WHERE p.task = %(task)s

-- name: paused_tasks
SELECT p.task FROM {x_paused_tasks} p ORDER BY p.task

-- name: task_fires
SELECT f.task, f.occurrence_ms, f.fired_at
FROM {x_task_fires} f
ORDER BY f.task
LIMIT %(limit)s

-- name: fire_task
-- One occurrence of a task in ONE statement: the watermark moves (x_task_fires_pkey) only when
-- %(occurrence_ms)s is later than the recorded one, and the occurrence's jobs are inserted only
-- when it moved; a paused task (x_paused_tasks_pkey) moves nothing. A crash leaves both or
-- neither; a second fire of the occurrence (a stale leader) inserts nothing, and a racing one
-- waits on the upsert's row lock, then finds it moved. The jobs are enqueue_many's (the same
-- input fragment, columns and ON CONFLICT DO NOTHING on the live key and the id; duplicates
-- inside the batch were folded in Python first).
WITH {enqueue_many_input},
fired AS (
    INSERT INTO {x_task_fires} AS f (task, occurrence_ms, fired_at)
    SELECT %(task)s, %(occurrence_ms)s, now()
    WHERE NOT EXISTS (SELECT 1 FROM {x_paused_tasks} p WHERE p.task = %(task)s)
    ON CONFLICT (task) DO UPDATE SET
        occurrence_ms = excluded.occurrence_ms,
        fired_at = excluded.fired_at
    WHERE f.occurrence_ms < excluded.occurrence_ms
    RETURNING f.task
),
inserted AS (
    {enqueue_many_insert}
    WHERE EXISTS (SELECT 1 FROM fired)
    ORDER BY i.name, coalesce(i.tenant_id, ''), i.idempotency_key
    ON CONFLICT DO NOTHING
    RETURNING id, queue, state
),
woken AS (
    SELECT pg_notify({channel}, q.queue)
    FROM (SELECT DISTINCT i.queue FROM inserted i WHERE i.state = 'ready') q
)
SELECT (SELECT count(*) FROM fired), (SELECT count(*) FROM inserted), (SELECT count(*) FROM woken)

-- name: register_worker
INSERT INTO {x_workers} AS w
    (id, host, started_at, queues, slots, visibility_timeout_ms, in_flight, last_heartbeat_at)
VALUES (%(id)s, %(host)s, now(), %(queues)s::text[], %(slots)s, %(visibility_timeout_ms)s,
        ARRAY[]::text[], now())
ON CONFLICT (id) DO UPDATE SET
    host = excluded.host,
    started_at = excluded.started_at,
    queues = excluded.queues,
    slots = excluded.slots,
    visibility_timeout_ms = excluded.visibility_timeout_ms,
    in_flight = excluded.in_flight,
    last_heartbeat_at = excluded.last_heartbeat_at
RETURNING w.id, w.host, w.started_at, w.queues, w.slots, w.in_flight, w.last_heartbeat_at

-- name: worker_heartbeat
UPDATE {x_workers} AS w SET
    last_heartbeat_at = now(),
    in_flight = %(in_flight)s::text[]
WHERE w.id = %(id)s

-- name: deregister_worker
DELETE FROM {x_workers} AS w WHERE w.id = %(id)s

-- name: workers
-- A worker row expires one visibility timeout after its last heartbeat.
SELECT w.id, w.host, w.started_at, w.queues, w.slots, w.in_flight, w.last_heartbeat_at
FROM {x_workers} w
WHERE w.last_heartbeat_at + w.visibility_timeout_ms * interval '1 millisecond' > now()
ORDER BY w.started_at, w.id

-- name: counter_tier
-- (fragment) the finest tier whose retention still covers %(since_ms)s (else the coarsest).
tier AS (
    SELECT t.bucket_ms, t.kept_ms
    FROM unnest({counter_bucket_ms}::integer[], {counter_kept_ms}::bigint[])
         WITH ORDINALITY AS t (bucket_ms, kept_ms, ord)
    WHERE floor(extract(epoch FROM now()) * 1000)::bigint - %(since_ms)s::bigint <= t.kept_ms
       OR t.ord = {counter_tiers}
    ORDER BY t.ord
    LIMIT 1
)

-- name: counters
-- x_job_counters_bucket_idx: one tier's buckets ending after since_ms (and inside the tier's
-- retention), the shards summed; oldest first, then by job.
WITH {counter_tier}
SELECT c.job, c.bucket_start, c.bucket_ms,
       sum(c.done), sum(c.retried), sum(c.failed), sum(c.dead), sum(c.duration_ms)
FROM {x_job_counters} c, tier
WHERE c.bucket_ms = tier.bucket_ms
  AND c.bucket_start + tier.bucket_ms * interval '1 millisecond'
      > to_timestamp(0) + %(since_ms)s::bigint * interval '1 millisecond'
  AND c.bucket_start + tier.bucket_ms * interval '1 millisecond'
      > now() - tier.kept_ms * interval '1 millisecond'
  AND (%(job)s::text IS NULL OR c.job = %(job)s::text)
GROUP BY c.job, c.bucket_start, c.bucket_ms
ORDER BY c.bucket_start, c.job

-- name: counter_totals
WITH {counter_tier}
SELECT coalesce(sum(c.done), 0), coalesce(sum(c.retried), 0), coalesce(sum(c.failed), 0),
       coalesce(sum(c.dead), 0), coalesce(sum(c.duration_ms), 0)
FROM {x_job_counters} c, tier
WHERE c.bucket_ms = tier.bucket_ms
  AND c.bucket_start + tier.bucket_ms * interval '1 millisecond'
      > to_timestamp(0) + %(since_ms)s::bigint * interval '1 millisecond'
  AND c.bucket_start + tier.bucket_ms * interval '1 millisecond'
      > now() - tier.kept_ms * interval '1 millisecond'

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

-- name: backfill_begin
INSERT INTO {x_backfills} (id, name, job_id, state, rows, cursor, started_at, updated_at)
VALUES (%(id)s::uuid, %(name)s, %(job_id)s, 'running', 0, %(cursor)s::jsonb, now(), now())
RETURNING id::text, name, state, rows, cursor, started_at, updated_at, job_id

-- name: backfill_advance
UPDATE {x_backfills} AS b SET
    rows = b.rows + %(rows)s,
    cursor = %(cursor)s::jsonb,
    updated_at = now()
WHERE b.id = %(id)s::uuid

-- name: backfill_finish
UPDATE {x_backfills} AS b SET
    state = %(state)s,
    updated_at = now()
WHERE b.id = %(id)s::uuid

-- name: backfill_list
-- x_backfills_started_idx, scanned backwards.
SELECT b.id::text, b.name, b.state, b.rows, b.cursor, b.started_at, b.updated_at, b.job_id
FROM {x_backfills} b
ORDER BY b.started_at DESC, b.id DESC
LIMIT %(limit)s

-- name: migrations_table
-- migrate(): the bookkeeping table, created before the first migration is read (it matches
-- schema.sql's definition; the migration test compares both).
CREATE TABLE IF NOT EXISTS x_schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)

-- name: migrations_applied
SELECT version FROM x_schema_migrations ORDER BY version

-- name: migration_done
INSERT INTO x_schema_migrations (version, name) VALUES (%(version)s, %(name)s)

-- name: migrate_lock
-- Two processes migrating one schema at once queue here; the lock ends with the transaction.
SELECT pg_advisory_xact_lock(%(key)s::bigint)

-- name: migrate_schema
CREATE SCHEMA IF NOT EXISTS {schema}

-- name: migrate_search_path
SET LOCAL search_path TO {schema}

-- name: wake_listen
-- The worker process's one LISTEN session (QueueWake). The channel is an identifier here.
LISTEN {channel_ident}

-- name: wake_probe
-- The proof probe, sent through the driver's pool: it must come back on the LISTEN session
-- (PgBouncer in transaction mode, for one, delivers no notification).
SELECT pg_notify({channel}, %(token)s)

-- name: outbox_stage
-- On the caller's connection, inside its transaction: the requests as one jsonb array, staged in
-- input order (identity ids in that order); the relay's channel is notified at commit.
WITH staged AS (
    INSERT INTO {x_outbox} (job_id, request)
    SELECT (e.r ->> 'id')::uuid, e.r
    FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS e (r, ord)
    ORDER BY e.ord
    RETURNING id
)
SELECT count(*), (SELECT count(pg_notify({outbox_channel}, '')) FROM (SELECT 1) one)
FROM staged

-- name: outbox_claim
-- Up to %(limit)s committed rows no relay holds, oldest first (x_outbox_pkey), leased for
-- %(lease_ms)s; a relay that dies strands them that long, no longer.
WITH picked AS MATERIALIZED (
    SELECT o.id
    FROM {x_outbox} o
    WHERE o.leased_until IS NULL OR o.leased_until <= now()
    ORDER BY o.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {x_outbox} AS o SET
    leased_until = now() + %(lease_ms)s::bigint * interval '1 millisecond'
WHERE o.id = ANY (ARRAY(SELECT id FROM picked))
RETURNING o.id, o.request

-- name: outbox_published
DELETE FROM {x_outbox} AS o WHERE o.id = ANY (%(ids)s::bigint[])

-- name: outbox_release
UPDATE {x_outbox} AS o SET leased_until = NULL WHERE o.id = ANY (%(ids)s::bigint[])

-- name: event_publish
-- One statement: store the event and wake the runs suspended on it (x_jobs_wait_event_idx),
-- announcing their queues. On the caller's connection it commits or rolls back with it. A run
-- that suspends after this statement but before its commit is not among `woken`: the
-- `{event_note}<id>` notification (delivered on commit) has the workers' LISTEN sessions run
-- wake_published for it.
WITH published AS (
    INSERT INTO {x_events} (event, payload) VALUES (%(event)s, %(payload)s::jsonb)
    RETURNING id
),
woken AS (
    UPDATE {x_jobs} AS j SET
        run_at = least(j.run_at, now()),
        updated_at = now()
    WHERE j.state = 'suspended' AND j.wait_event = %(event)s
    RETURNING j.queue
),
announced AS (
    SELECT pg_notify({channel}, q.queue) FROM (SELECT DISTINCT queue FROM woken) q
)
SELECT p.id::text, (SELECT count(*) FROM woken), (SELECT count(*) FROM announced),
       pg_notify({channel}, {event_note} || p.id::text)
FROM published p

-- name: wake_published
-- A LISTEN session heard event %(id)s committed: make the runs suspended on it due now (they
-- suspended after its publish statement), announcing their queues. Every worker hears it; a
-- row already due is left alone, so the first does the work and the others change nothing.
WITH woken AS (
    UPDATE {x_jobs} AS j SET
        run_at = now(),
        updated_at = now()
    WHERE j.state = 'suspended'
      AND j.wait_event = (SELECT e.event FROM {x_events} e WHERE e.id = %(id)s::bigint)
      AND j.run_at > now()
    RETURNING j.queue
),
announced AS (
    SELECT pg_notify({channel}, q.queue) FROM (SELECT DISTINCT queue FROM woken) q
)
SELECT (SELECT count(*) FROM woken), (SELECT count(*) FROM announced)

-- name: event_marker
-- A position on the bus: the current snapshot. An event is "after" it when its transaction is
-- one this snapshot cannot see (committed later, or still in flight when the marker was taken).
SELECT pg_current_snapshot()::text

-- name: event_find_after
-- x_events_event_tx_idx: the event's rows at or past the marker's xmin, minus those the marker
-- could see; oldest first.
SELECT e.payload
FROM {x_events} e
WHERE e.event = %(event)s
  AND e.tx >= pg_snapshot_xmin(%(marker)s::pg_snapshot)
  AND NOT pg_visible_in_snapshot(e.tx, %(marker)s::pg_snapshot)
ORDER BY e.id
LIMIT %(limit)s

-- name: purge_events
DELETE FROM {x_events} AS e
WHERE e.created_at <= now() - %(kept_ms)s::bigint * interval '1 millisecond'

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
