-- 0004: crash accounting. `crashes` counts the lapses whose worker was known dead (its process
-- died holding the run), over the job's life; `crash_streak` counts those since the run last
-- settled an attempt (retry, dead, failed) or completed a step since the crash before (progress):
-- above 0 the job runs isolated, and past the job's max_crashes isolated crashes it is dead with
-- X_JOB_CRASHED. `crashed_at` is the last crash's time (the progress check's mark). A constant
-- default (or none) rewrites no row.

ALTER TABLE x_jobs
    ADD COLUMN crashes integer NOT NULL DEFAULT 0 CHECK (crashes >= 0),
    ADD COLUMN crash_streak integer NOT NULL DEFAULT 0 CHECK (crash_streak >= 0),
    ADD COLUMN crashed_at timestamptz;
