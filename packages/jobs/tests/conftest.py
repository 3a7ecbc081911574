"""Shared fixtures of the jobs tests. Postgres ones run against a real server (``DATABASE_URL``,
default ``postgresql://postgres@127.0.0.1:5432/test``) and never skip: a missing server fails."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg import sql

from ultimat3.jobs.postgres import PostgresJobDriver, migrate, postgres_job_driver

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="session")
def database_url() -> str:
    """The server the Postgres tests use."""
    return os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL


async def drop_schema(database_url: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


@pytest.fixture
async def pg_schema(database_url: str) -> AsyncIterator[str]:
    """A schema of this test's own, migrated, dropped afterwards (xdist-safe: unique names)."""
    schema = f"x_test_{uuid.uuid4().hex[:16]}"
    await migrate(database_url, schema=schema)
    try:
        yield schema
    finally:
        await drop_schema(database_url, schema)


@pytest.fixture
async def pg_driver(database_url: str, pg_schema: str) -> AsyncIterator[PostgresJobDriver]:
    """A Postgres driver over this test's own schema; closed afterwards."""
    driver = postgres_job_driver(database_url, schema=pg_schema)
    try:
        yield driver
    finally:
        await driver.close()


@pytest.fixture
async def scratch_schemas(database_url: str) -> AsyncIterator[list[str]]:
    """A list the test appends the schemas it creates to; each is dropped afterwards."""
    made: list[str] = []
    try:
        yield made
    finally:
        for schema in made:
            await drop_schema(database_url, schema)
