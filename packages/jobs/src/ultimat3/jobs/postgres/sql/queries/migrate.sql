-- ultimat3.jobs, migrations: the ledger and its lock.
-- The rules every statement file follows are at the top of common.sql.

-- name: migrations_table
-- migrate(): the bookkeeping table, created before the first migration is read (it matches
-- schema.sql's definition; the migration test compares both).
CREATE TABLE IF NOT EXISTS x_schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)

-- name: migrations_applied
SELECT version FROM x_schema_migrations ORDER BY version

-- name: migration_done
INSERT INTO x_schema_migrations (version, name) VALUES (%(version)s, %(name)s)

-- name: migrate_lock
-- Two processes migrating one schema at once queue here; the lock ends with the transaction.
SELECT pg_advisory_xact_lock(%(key)s::bigint)

-- name: migrate_schema
CREATE SCHEMA IF NOT EXISTS {schema}

-- name: migrate_search_path
SET LOCAL search_path TO {schema}
