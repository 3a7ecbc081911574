-- ultimat3.jobs, tasks: fires (one statement per occurrence) and pauses.
-- The rules every statement file follows are at the top of common.sql.

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
