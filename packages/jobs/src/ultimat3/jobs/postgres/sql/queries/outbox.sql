-- ultimat3.jobs, the outbox: staged enqueues and their relay.
-- The rules every statement file follows are at the top of common.sql.

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

-- name: outbox_listen
-- The relay's LISTEN session (OutboxWake): an idle relay passes when a stage commits.
LISTEN {outbox_channel_ident}

-- name: outbox_probe
-- The wake's proof, sent through the store's pool: it must come back on the LISTEN session.
SELECT pg_notify({outbox_channel}, %(token)s)
