-- ultimat3.jobs, the worker registry (x_workers).
-- The rules every statement file follows are at the top of common.sql.

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
-- plan: generic
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
