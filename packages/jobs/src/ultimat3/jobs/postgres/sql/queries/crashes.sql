-- ultimat3.jobs, crashes: which lapsed lease is a CRASH (its worker is known dead), pasted into
-- the claim's `lapsed` CTE over `x_jobs AS j` (fragments). A crash is not an attempt: the claim
-- re-offers the row with its attempt handed back and one more crash on record (crashes,
-- crash_streak); the worker runs a row with a crash streak isolated (_process/isolation.py).
-- The rules every statement file follows are at the top of common.sql.

-- name: lapse_crashed
-- (fragment) the worker holding `j` is known dead: its registry row (x_workers_pkey) expired,
-- one visibility timeout after its last heartbeat (a worker that never heartbeat expires from
-- its registration). A worker with no registry row (a hand-driven claim, a driver extra unused)
-- is not known dead: its lapse is an attempt, as before.
EXISTS (
    SELECT 1 FROM {x_workers} w
    WHERE w.id = j.worker_id
      AND w.last_heartbeat_at + w.visibility_timeout_ms * interval '1 millisecond' <= now())

-- name: lapse_deferred
-- (fragment) not yet known: the worker's registry row is live and names `j` in flight, so it may
-- still be running it (its registry expires up to one renewal interval after the job's lease).
-- The lapse waits for the registry, at most one more window past the lease.
EXISTS (
    SELECT 1 FROM {x_workers} w
    WHERE w.id = j.worker_id
      AND w.last_heartbeat_at + w.visibility_timeout_ms * interval '1 millisecond' > now()
      AND j.lease_expires_at + w.visibility_timeout_ms * interval '1 millisecond' > now()
      AND j.id::text = ANY (w.in_flight))

-- name: crash_of_lapse
-- (fragment) 1 when the claimed row `j` comes back from a crash (the claim's `lapsed` CTE), else 0.
(j.id IN (SELECT l.id FROM lapsed l WHERE l.crashed))::integer

-- name: lapse_progressed
-- (fragment) the crashed run of `j` made progress: a step completed since the crash before
-- (x_job_steps_pkey). Its crash then starts a new streak (1) instead of lengthening it, so a long
-- job killed again and again while it checkpoints (an import, page by page) is not a poison.
EXISTS (
    SELECT 1 FROM {x_job_steps} s
    WHERE s.job_id = j.id AND s.state = 'completed' AND s.updated_at > j.crashed_at)

-- name: streak_of_lapse
-- (fragment) the claimed row's crash streak: one more for a crash, 1 for a crash after progress.
CASE
    WHEN j.id IN (SELECT l.id FROM lapsed l WHERE l.crashed AND l.progressed) THEN 1
    ELSE j.crash_streak + {crash_of_lapse}
END
