-- ultimat3.jobs, enqueue: one job, a batch, the live-key probe, the holder read-back.
-- The rules every statement file follows are at the top of common.sql.

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
-- (fragment) the inserted row's id and run id; the notify rides it for a ready or delayed row
-- (a delayed one: the woken worker's claim reads when it falls due, its due timer):
-- transactional, delivered at commit, never on a rollback.
RETURNING id::text, run_id::text,
          CASE WHEN %(notify)s AND state IN ('ready', 'delayed')
               THEN pg_notify({channel}, queue) END

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
-- (fragment) after an `inserted` CTE: the notify (one per queue with a ready or delayed row, when
-- %(notify)s), then ONE summary row (ord 0): how many rows were inserted, how many notified.
woken AS (
    SELECT pg_notify({channel}, q.queue)
    FROM (SELECT DISTINCT i.queue FROM inserted i WHERE i.state IN ('ready', 'delayed')) q
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
