"""``migrate()``: the versioned, idempotent schema migration.

Every pending file of ``sql/migrations/`` runs in ONE transaction under
``pg_advisory_xact_lock``, so two processes migrating at once are safe: the second waits, then
finds nothing to do. Applied versions are rows of ``x_schema_migrations``.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from psycopg_pool import AsyncConnectionPool

from ultimat3.core import XError, log_event
from ultimat3.jobs.postgres._db import Conn, Pool, wrap_errors
from ultimat3.jobs.postgres._sql import blocks, check_schema_name, compile_queries, migration_files


def migrate_lock_key(schema: str) -> int:
    """The advisory lock two migrations of one schema meet on (a signed 64-bit int)."""
    digest = hashlib.sha256(f"ultimat3.jobs.migrate:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@asynccontextmanager
async def _connection(source: str | Pool | Conn) -> AsyncIterator[Conn]:
    if isinstance(source, str):
        conn = await psycopg.AsyncConnection.connect(source, autocommit=True)
        try:
            yield conn
        finally:
            await conn.close()
    elif isinstance(source, AsyncConnectionPool):
        async with source.connection() as conn:
            yield conn
    elif isinstance(source, psycopg.AsyncConnection):
        yield source
    else:
        raise XError(
            "X_CONFIG_INVALID",
            f"migrate: {type(source).__name__} is neither a DSN, an AsyncConnectionPool nor an "
            "AsyncConnection",
            fix="migrate(DATABASE_URL) or migrate(pool)",
        )


async def migrate(dsn_or_pool: str | Pool | Conn, *, schema: str | None = None) -> list[int]:
    """Bring ``schema`` (default ``public``, created when missing) to the newest version.
    Answers the versions this call applied (``[]`` when it was already current)."""
    name = check_schema_name("public" if schema is None else schema)
    q = compile_queries(name)
    applied_now: list[int] = []
    with wrap_errors(f"migrating schema {name!r}"):
        async with _connection(dsn_or_pool) as conn, conn.transaction():
            await conn.execute(q["migrate_lock"], {"key": migrate_lock_key(name)})
            await conn.execute(q["migrate_schema"])
            await conn.execute(q["migrate_search_path"])
            await conn.execute(blocks()["migrations_table"])
            cur = await conn.execute(blocks()["migrations_applied"])
            done = {int(r[0]) for r in await cur.fetchall()}
            for version, file_name, text in migration_files():
                if version in done:
                    continue
                await conn.execute(text.encode())
                await conn.execute(
                    blocks()["migration_done"], {"version": version, "name": file_name}
                )
                applied_now.append(version)
    if applied_now:
        log_event("jobs.postgres.migrated", schema=name, versions=applied_now)
    return applied_now
