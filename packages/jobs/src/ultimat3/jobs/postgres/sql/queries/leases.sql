-- ultimat3.jobs, leases: concurrency slots and locks (x_leases).
-- The rules every statement file follows are at the top of common.sql.

-- name: lease_acquire
-- x_job_leases_pkey. The holder's own unexpired slot comes back renewed; else the lowest slot
-- below the limit that is free or expired. Two workers reaching for one slot meet on the
-- primary key: the loser's ON CONFLICT sees the slot taken and grants nothing (it asks again).
-- Every grant takes a new token from x_job_lease_tokens.
WITH mine AS (
    SELECT l.slot
    FROM {x_job_leases} l
    WHERE l.lease_key = %(key)s AND l.holder = %(holder)s
      AND l.slot < %(limit)s AND l.expires_at > now()
    ORDER BY l.slot
    LIMIT 1
),
choice AS (
    SELECT coalesce(
        (SELECT slot FROM mine),
        (SELECT s.slot
         FROM generate_series(0, %(limit)s - 1) AS s (slot)
         WHERE NOT EXISTS (
             SELECT 1 FROM {x_job_leases} l
             WHERE l.lease_key = %(key)s AND l.slot = s.slot AND l.expires_at > now())
         ORDER BY s.slot
         LIMIT 1)
    ) AS slot
),
granted AS (
    INSERT INTO {x_job_leases} AS l (lease_key, slot, holder, token, expires_at)
    SELECT %(key)s, c.slot, %(holder)s, nextval({lease_tokens}),
           now() + %(ttl_ms)s::bigint * interval '1 millisecond'
    FROM choice c
    WHERE c.slot IS NOT NULL
    ON CONFLICT (lease_key, slot) DO UPDATE SET
        holder = excluded.holder,
        token = excluded.token,
        expires_at = excluded.expires_at
    WHERE l.expires_at <= now() OR l.holder = excluded.holder
    RETURNING l.slot, l.token, floor(extract(epoch FROM l.expires_at) * 1000)::bigint
)
SELECT g.slot, g.token, g.expires_ms, c.slot
FROM choice c
LEFT JOIN granted AS g (slot, token, expires_ms) ON true

-- name: lease_renew
UPDATE {x_job_leases} AS l SET
    expires_at = now() + %(ttl_ms)s::bigint * interval '1 millisecond'
WHERE l.lease_key = %(key)s AND l.slot = %(slot)s AND l.holder = %(holder)s
  AND l.expires_at > now()

-- name: lease_release
DELETE FROM {x_job_leases} AS l
WHERE l.lease_key = %(key)s AND l.slot = %(slot)s AND l.holder = %(holder)s

-- name: lease_holders
SELECT l.slot, l.holder, l.token, floor(extract(epoch FROM l.expires_at) * 1000)::bigint
FROM {x_job_leases} l
WHERE l.lease_key = %(key)s AND l.expires_at > now()
ORDER BY l.slot
