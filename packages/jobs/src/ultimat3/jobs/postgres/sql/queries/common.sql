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
--
-- One file per concern (this folder); block names are unique across them.
--
-- A block whose leading comment holds the line `-- plan: generic` runs on the driver's own pool
-- under `plan_cache_mode = force_generic_plan` (_db.GENERIC): the worker's hot statements,
-- planned once per connection instead of at every execution. Mark only a statement whose plan
-- does not hinge on a parameter's value (no `%(x)s IS NULL OR ...` filter).

-- name: job_columns
-- (fragment) a JobRow, in _rows.job_row's order, from `x_jobs AS j`.
j.id::text, j.run_id::text, j.name, j.queue, j.state, j.attempts, j.max_attempts, j.run_at,
j.created_at, j.updated_at, j.idempotency_key, j.payload, j.tenant_id, j.concurrency_key,
j.last_error, j.progress, j.result, j.worker_id, j.lease_expires_at, j.finished_at,
j.crashes

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
