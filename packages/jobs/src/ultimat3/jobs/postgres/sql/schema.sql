-- ultimat3.jobs: the Postgres driver's schema. AUTHORITATIVE: every table and index of the
-- driver is here, in one readable place. The migrations under migrations/ must reproduce it
-- exactly (tests/test_postgres_migrate.py compares the catalogs of both).
--
-- Unqualified names: migrate() runs this under `SET LOCAL search_path` to the target schema.
-- Every time on every row comes from the database clock (now()), never a worker's.

-- Which migrations ran (migrate() is versioned, idempotent, one transaction, advisory-locked).
CREATE TABLE x_schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per job run. Terminal rows are kept for introspection and purged after
-- DONE_RETENTION (14 d, done) or DEAD_RETENTION (90 d, dead / failed / cancelled).
CREATE TABLE x_jobs (
    id                uuid PRIMARY KEY,
    run_id            uuid NOT NULL,
    name              text COLLATE "C" NOT NULL,
    queue             text COLLATE "C" NOT NULL,
    state             text NOT NULL CHECK (state IN (
                          'ready', 'delayed', 'running', 'suspended',
                          'done', 'failed', 'dead', 'cancelled')),
    payload           jsonb,
    idempotency_key   text COLLATE "C" NOT NULL,
    tenant_id         text COLLATE "C",
    concurrency_key   text COLLATE "C",
    attempts          integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts      integer NOT NULL CHECK (max_attempts >= 1),
    run_at            timestamptz NOT NULL,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    finished_at       timestamptz,
    worker_id         text COLLATE "C",
    claim             uuid,
    lease_expires_at  timestamptz,
    last_error        jsonb,
    progress          jsonb,
    result            jsonb,
    wait_event        text COLLATE "C",
    -- the enqueuing request's trace context (traceparent / tracestate); NULL without a span
    trace_context     jsonb,
    -- lapses whose worker was known dead (crashes), and those since the last settled attempt
    -- (crash_streak: above 0 the job runs isolated; see queries/crashes.sql), the last crash's time
    crashes           integer NOT NULL DEFAULT 0 CHECK (crashes >= 0),
    crash_streak      integer NOT NULL DEFAULT 0 CHECK (crash_streak >= 0),
    crashed_at        timestamptz
);

-- The dedupe key: one LIVE row per (name, tenant, idempotency key). Serves enqueue /
-- enqueue_many (ON CONFLICT DO NOTHING, then the read-back of the live row) and the live-holder
-- checks of requeue / requeue_many. A NULL tenant is a scope of its own.
CREATE UNIQUE INDEX x_jobs_name_tenant_idempotency_live_idx
    ON x_jobs (name, (coalesce(tenant_id, '')), idempotency_key)
    WHERE state IN ('ready', 'delayed', 'running', 'suspended');

-- claim: the due rows of one queue, oldest run_at first (one index range scan per queue,
-- stopped at the limit by FOR UPDATE SKIP LOCKED). Also promote / wake read through it.
CREATE INDEX x_jobs_claim_idx
    ON x_jobs (queue, run_at, id)
    WHERE state IN ('ready', 'delayed', 'suspended');

-- claim: per queue, running rows whose lease lapsed (re-offered, or settled dead on the final
-- attempt). Per queue, so lapsed rows of a queue nobody serves cost other claims nothing.
CREATE INDEX x_jobs_lapsed_idx
    ON x_jobs (queue, lease_expires_at)
    WHERE state = 'running';

-- wake_waiters: the rows suspended on an event.
CREATE INDEX x_jobs_wait_event_idx
    ON x_jobs (wait_event)
    WHERE state = 'suspended';

-- introspect.list (keyset, newest first: created_at DESC, id DESC, scanned backwards) and
-- purge (terminal rows created before the retention cut-off).
CREATE INDEX x_jobs_created_idx
    ON x_jobs (created_at, id);

-- Text keys are COLLATE "C": byte comparisons (fast, and the same order as Python's sort).

-- Durable step results, one row per (job, step name); gone with the job.
CREATE TABLE x_job_steps (
    job_id      uuid NOT NULL REFERENCES x_jobs (id) ON DELETE CASCADE,
    name        text COLLATE "C" NOT NULL,
    state       text NOT NULL CHECK (state IN ('started', 'completed', 'failed')),
    executions  integer NOT NULL DEFAULT 0,
    output      jsonb,
    error       jsonb,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (job_id, name)
);

-- Fencing tokens of lease grants: greater than every earlier token, for any key.
CREATE SEQUENCE x_job_lease_tokens;

-- Fleet-wide slots (job concurrency, with_lock): one row per held slot. The primary key is what
-- serialises two workers reaching for the same slot; it serves every lease statement.
CREATE TABLE x_job_leases (
    lease_key   text COLLATE "C" NOT NULL,
    slot        integer NOT NULL CHECK (slot >= 0),
    holder      text COLLATE "C" NOT NULL,
    token       bigint NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (lease_key, slot)
);

-- Settle counters, moved by the settling statement itself. One row per (job, tier, bucket,
-- shard); the shard (the backend's pid mod 8) keeps concurrent settles of one job from queueing
-- on one row. Reads sum the shards. Tiers: 1-minute buckets kept 24 h, 5-minute 7 d, 1-hour 30 d.
CREATE TABLE x_job_counters (
    job           text COLLATE "C" NOT NULL,
    bucket_ms     integer NOT NULL,
    bucket_start  timestamptz NOT NULL,
    shard         smallint NOT NULL,
    done          bigint NOT NULL DEFAULT 0,
    retried       bigint NOT NULL DEFAULT 0,
    failed        bigint NOT NULL DEFAULT 0,
    dead          bigint NOT NULL DEFAULT 0,
    duration_ms   bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (job, bucket_ms, bucket_start, shard)
);

-- introspect.counters / counter_totals: one tier's buckets since a time, every job.
CREATE INDEX x_job_counters_bucket_idx
    ON x_job_counters (bucket_ms, bucket_start);

-- The transactional outbox: enqueues staged in a transaction the driver could not join, moved
-- onto the queue by the relay (claim a batch in staging order, enqueue_many, then delete the
-- published rows). Every row keeps the job id it was staged with, so a batch republished after a
-- crash adds no job. x_outbox_pkey serves the relay's claim (oldest id first).
CREATE TABLE x_outbox (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        uuid NOT NULL,
    request       jsonb NOT NULL,
    staged_at     timestamptz NOT NULL DEFAULT now(),
    leased_until  timestamptz
);

-- The event bus behind step.wait_for_event. `tx` is the publishing transaction, so a wait that
-- began under a snapshot also matches every event that snapshot could not see.
CREATE TABLE x_events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event       text COLLATE "C" NOT NULL,
    payload     jsonb,
    tx          xid8 NOT NULL DEFAULT pg_current_xact_id(),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- find_after: one event's rows from transactions a marker's snapshot could not see (every such
-- transaction id is at or above the snapshot's xmin).
CREATE INDEX x_events_event_tx_idx
    ON x_events (event, tx);

-- The backfill() ledger: one row per pass.
CREATE TABLE x_backfills (
    id          uuid PRIMARY KEY,
    name        text COLLATE "C" NOT NULL,
    job_id      text,
    state       text NOT NULL CHECK (state IN ('running', 'done', 'failed', 'cancelled')),
    rows        bigint NOT NULL DEFAULT 0,
    cursor      jsonb,
    started_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);

-- backfills.list: newest first.
CREATE INDEX x_backfills_started_idx
    ON x_backfills (started_at, id);

-- The last occurrence of each task that queued its jobs (the scheduler's watermark).
CREATE TABLE x_task_fires (
    task           text COLLATE "C" PRIMARY KEY,
    occurrence_ms  bigint NOT NULL,
    fired_at       timestamptz NOT NULL
);

-- Who is working: a row expires one visibility timeout after its last heartbeat.
CREATE TABLE x_workers (
    id                     text COLLATE "C" PRIMARY KEY,
    host                   text NOT NULL,
    started_at             timestamptz NOT NULL,
    queues                 text[] NOT NULL,
    slots                  integer,
    visibility_timeout_ms  integer NOT NULL,
    in_flight              text[] NOT NULL DEFAULT '{}',
    last_heartbeat_at      timestamptz NOT NULL
);

-- Paused queues are read by the claim statement itself; paused tasks by the scheduler.
CREATE TABLE x_paused_queues (
    queue      text COLLATE "C" PRIMARY KEY,
    paused_at  timestamptz NOT NULL
);

CREATE TABLE x_paused_tasks (
    task       text COLLATE "C" PRIMARY KEY,
    paused_at  timestamptz NOT NULL
);

-- The redaction catalog (0006): job name -> the x-sensitive paths of its input schema, a JSON
-- array of arrays of property names ("*": every item / value). Upserted by a worker at start
-- (a union), read by `x jobs show` and the dashboard.
CREATE TABLE x_job_redactions (
    name         text COLLATE "C" PRIMARY KEY,
    paths        jsonb NOT NULL,
    declared_at  timestamptz NOT NULL
);
