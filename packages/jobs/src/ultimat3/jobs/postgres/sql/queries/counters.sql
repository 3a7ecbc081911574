-- ultimat3.jobs, counters: the tiered buckets a settle moves, and their reads.
-- The rules every statement file follows are at the top of common.sql.

-- name: counter_tier
-- (fragment) the finest tier whose retention still covers %(since_ms)s (else the coarsest).
tier AS (
    SELECT t.bucket_ms, t.kept_ms
    FROM unnest({counter_bucket_ms}::integer[], {counter_kept_ms}::bigint[])
         WITH ORDINALITY AS t (bucket_ms, kept_ms, ord)
    WHERE floor(extract(epoch FROM now()) * 1000)::bigint - %(since_ms)s::bigint <= t.kept_ms
       OR t.ord = {counter_tiers}
    ORDER BY t.ord
    LIMIT 1
)

-- name: counters
-- x_job_counters_bucket_idx: one tier's buckets ending after since_ms (and inside the tier's
-- retention), the shards summed; oldest first, then by job.
WITH {counter_tier}
SELECT c.job, c.bucket_start, c.bucket_ms,
       sum(c.done), sum(c.retried), sum(c.failed), sum(c.dead), sum(c.duration_ms)
FROM {x_job_counters} c, tier
WHERE c.bucket_ms = tier.bucket_ms
  AND c.bucket_start + tier.bucket_ms * interval '1 millisecond'
      > to_timestamp(0) + %(since_ms)s::bigint * interval '1 millisecond'
  AND c.bucket_start + tier.bucket_ms * interval '1 millisecond'
      > now() - tier.kept_ms * interval '1 millisecond'
  AND (%(job)s::text IS NULL OR c.job = %(job)s::text)
GROUP BY c.job, c.bucket_start, c.bucket_ms
ORDER BY c.bucket_start, c.job

-- name: counter_totals
WITH {counter_tier}
SELECT coalesce(sum(c.done), 0), coalesce(sum(c.retried), 0), coalesce(sum(c.failed), 0),
       coalesce(sum(c.dead), 0), coalesce(sum(c.duration_ms), 0)
FROM {x_job_counters} c, tier
WHERE c.bucket_ms = tier.bucket_ms
  AND c.bucket_start + tier.bucket_ms * interval '1 millisecond'
      > to_timestamp(0) + %(since_ms)s::bigint * interval '1 millisecond'
  AND c.bucket_start + tier.bucket_ms * interval '1 millisecond'
      > now() - tier.kept_ms * interval '1 millisecond'
