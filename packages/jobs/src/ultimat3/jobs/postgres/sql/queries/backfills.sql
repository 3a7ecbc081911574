-- ultimat3.jobs, the backfill ledger (x_backfills).
-- The rules every statement file follows are at the top of common.sql.

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
