-- ultimat3.jobs, the redaction catalog (x_job_redactions).
-- The rules every statement file follows are at the top of common.sql.

-- name: redactions_declare
-- One statement for every job a worker runs: each name's paths join the stored set (a union,
-- kept in first-seen order; paths compared whole, never by jsonb containment, which would take
-- ["a"] as held by ["a", "b"]); a set with nothing new writes nothing.
INSERT INTO {x_job_redactions} AS r (name, paths, declared_at)
SELECT d.name, d.paths, now()
FROM unnest(%(names)s::text[], %(paths)s::jsonb[]) AS d(name, paths)
ON CONFLICT (name) DO UPDATE SET
    paths = r.paths || COALESCE((
        SELECT jsonb_agg(p ORDER BY o)
        FROM jsonb_array_elements(EXCLUDED.paths) WITH ORDINALITY AS e(p, o)
        WHERE NOT EXISTS (SELECT 1 FROM jsonb_array_elements(r.paths) AS s(p) WHERE s.p = e.p)
    ), '[]'::jsonb),
    declared_at = now()
WHERE EXISTS (
    SELECT 1 FROM jsonb_array_elements(EXCLUDED.paths) AS e(p)
    WHERE NOT EXISTS (SELECT 1 FROM jsonb_array_elements(r.paths) AS s(p) WHERE s.p = e.p)
)

-- name: redactions_lookup
SELECT r.name, r.paths
FROM {x_job_redactions} r
WHERE r.name = ANY(%(names)s::text[])
