-- 0006: the redaction catalog. A worker upserts, when it starts, the paths its jobs' input
-- schemas mark x-sensitive (job name -> a JSON array of paths, each an array of property names
-- with "*" for every item / value); `x jobs show` and the dashboard read it, having no app
-- loaded. A union per name: a worker of an older version never un-redacts a path.

CREATE TABLE x_job_redactions (
    name         text COLLATE "C" PRIMARY KEY,
    paths        jsonb NOT NULL,
    declared_at  timestamptz NOT NULL
);
