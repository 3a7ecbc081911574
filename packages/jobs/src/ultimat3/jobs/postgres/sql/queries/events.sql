-- ultimat3.jobs, events for step.wait_for_event, and the LISTEN session's statements.
-- The rules every statement file follows are at the top of common.sql.

-- name: wake_listen
-- The worker process's one LISTEN session (QueueWake). The channel is an identifier here.
LISTEN {channel_ident}

-- name: settle_listen
-- A job.result() waiter's LISTEN session (one per driver, opened on the first wait).
LISTEN {settle_channel_ident}

-- name: wake_probe
-- The proof probe, sent through the driver's pool: it must come back on the LISTEN session
-- (PgBouncer in transaction mode, for one, delivers no notification).
SELECT pg_notify({channel}, %(token)s)

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
