"""Fixtures of the http tests: a Postgres schema and a Redis key prefix of the test's own (real
servers, ``DATABASE_URL`` / ``REDIS_URL``; a missing server fails, never skips), dropped after."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg import sql
from redis.asyncio import Redis

DATABASE_URL = os.environ.get("DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/test"
REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"


@pytest.fixture
async def pg_schema() -> AsyncIterator[str]:
    schema = f"x_http_{uuid.uuid4().hex[:16]}"
    try:
        yield schema
    finally:
        async with await psycopg.AsyncConnection.connect(DATABASE_URL, autocommit=True) as conn:
            await conn.execute(
                sql.SQL("drop schema if exists {} cascade").format(sql.Identifier(schema))
            )


@pytest.fixture
async def redis_prefix() -> AsyncIterator[tuple[Redis, str]]:
    client = Redis.from_url(REDIS_URL)
    prefix = f"t-http-{uuid.uuid4().hex[:16]}:"
    try:
        yield client, prefix
    finally:
        async for key in client.scan_iter(match=prefix + "*", count=1000):
            await client.delete(key)
        await client.aclose()
