"""migrate(): versioned, idempotent, one transaction under an advisory lock, and the migrations
reproduce sql/schema.sql exactly."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from ultimat3.core import XError, capture_log_events
from ultimat3.jobs.postgres import migrate, postgres_job_driver
from ultimat3.jobs.postgres._sql import TABLES, migration_files, sql_text

CATALOG: dict[str, str] = {
    "columns": """
        SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
               a.attnotnull, pg_get_expr(d.adbin, d.adrelid), co.collname, a.attidentity
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        LEFT JOIN pg_collation co ON co.oid = a.attcollation
        WHERE n.nspname = %(schema)s AND c.relkind = 'r' AND a.attnum > 0
          AND NOT a.attisdropped
        ORDER BY 1, 2""",
    "indexes": """
        SELECT indexname, replace(indexdef, quote_ident(%(schema)s) || '.', 'S.')
        FROM pg_indexes WHERE schemaname = %(schema)s ORDER BY 1""",
    "constraints": """
        SELECT c.relname, k.conname, k.contype,
               replace(pg_get_constraintdef(k.oid), quote_ident(%(schema)s) || '.', 'S.')
        FROM pg_constraint k
        JOIN pg_class c ON c.oid = k.conrelid
        JOIN pg_namespace n ON n.oid = k.connamespace
        WHERE n.nspname = %(schema)s ORDER BY 1, 2""",
    "sequences": """
        SELECT sequencename, data_type::text, start_value, increment_by, cycle
        FROM pg_sequences WHERE schemaname = %(schema)s ORDER BY 1""",
    "tables": """
        SELECT c.relname, c.relkind, c.relpersistence
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s ORDER BY 1""",
}


async def catalog(database_url: str, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = {}
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        for part, query in CATALOG.items():
            cur = await conn.execute(query, {"schema": schema})
            out[part] = await cur.fetchall()
    return out


@pytest.fixture
def fresh(scratch_schemas: list[str]) -> list[str]:
    return scratch_schemas


def name(made: list[str], base: str = "x_mig") -> str:
    schema = f"{base}_{uuid.uuid4().hex[:12]}"
    made.append(schema)
    return schema


async def test_the_migrations_reproduce_schema_sql(database_url: str, fresh: list[str]) -> None:
    migrated, authored = name(fresh), name(fresh)
    await migrate(database_url, schema=migrated)
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(authored)))
        await conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(authored)))
        await conn.execute(sql_text("schema.sql").encode())
        await conn.commit()
    a = await catalog(database_url, migrated)
    b = await catalog(database_url, authored)
    assert {r[0] for r in a["tables"] if r[1] == "r"} == set(TABLES)
    for part in CATALOG:
        assert a[part] == b[part], f"the migrations and schema.sql disagree on {part}"


async def test_migrate_is_idempotent_and_versioned(database_url: str, fresh: list[str]) -> None:
    schema = name(fresh)
    versions = [v for v, _, _ in migration_files()]
    assert versions == sorted(versions) and versions[0] == 1
    with capture_log_events() as events:
        assert await migrate(database_url, schema=schema) == versions
        assert await migrate(database_url, schema=schema) == []
    assert [e["versions"] for e in events if e["event"] == "jobs.postgres.migrated"] == [versions]
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT version, name FROM {} ORDER BY version").format(
                sql.Identifier(schema, "x_schema_migrations")
            )
        )
        assert [r[0] for r in await cur.fetchall()] == versions


async def test_two_migrations_at_once_apply_each_version_once(
    database_url: str, fresh: list[str]
) -> None:
    schema = name(fresh)
    results = await asyncio.gather(*(migrate(database_url, schema=schema) for _ in range(4)))
    applied = [r for r in results if r]
    assert len(applied) == 1 and applied[0] == [v for v, _, _ in migration_files()]
    assert results.count([]) == 3


async def test_migrate_takes_a_pool_or_a_connection(database_url: str, fresh: list[str]) -> None:
    via_pool, via_conn = name(fresh), name(fresh)
    async with AsyncConnectionPool(database_url, min_size=1, max_size=1, open=False) as pool:
        assert await migrate(pool, schema=via_pool) == [v for v, _, _ in migration_files()]
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        assert await migrate(conn, schema=via_conn) == [v for v, _, _ in migration_files()]
        assert await migrate(conn, schema=via_conn) == []


async def test_a_hostile_schema_name_is_quoted_never_spliced(
    database_url: str, fresh: list[str]
) -> None:
    schema = f'we"ird; DROP SCHEMA public; -- ü {uuid.uuid4().hex[:6]}'
    fresh.append(schema)
    assert await migrate(database_url, schema=schema) == [v for v, _, _ in migration_files()]
    driver = postgres_job_driver(database_url, schema=schema)
    try:
        assert await driver.stats() == []
    finally:
        await driver.close()
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cur = await conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'public'")
        assert (await cur.fetchone()) == (1,)


async def test_a_schema_name_postgres_cannot_hold_is_refused(database_url: str) -> None:
    for bad in ("", "x" * 64, "nul\x00byte"):
        with pytest.raises(XError) as caught:
            await migrate(database_url, schema=bad)
        assert caught.value.code == "X_CONFIG_INVALID"
        assert "schema" in caught.value.message
    with pytest.raises(XError) as caught:
        await migrate(42, schema="s")  # type: ignore[arg-type]
    assert caught.value.code == "X_CONFIG_INVALID" and "int" in caught.value.message


async def test_migrate_against_no_server_is_driver_unavailable() -> None:
    with pytest.raises(XError) as caught:
        await migrate("postgresql://postgres@127.0.0.1:1/test?connect_timeout=2", schema="s")
    assert caught.value.code == "X_DRIVER_UNAVAILABLE"
    assert "migrating schema 's'" in caught.value.message
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)
