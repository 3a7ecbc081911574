"""Fixtures for the Redis driver's tests: a real redis-server (``REDIS_URL``, default
``redis://127.0.0.1:6379/0``), one fresh key prefix per test, every key of it deleted after."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from ultimat3.core import new_id
from ultimat3.jobs._model import EnqueueRequest
from ultimat3.jobs_redis import RedisJobDriver, redis_job_driver

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def fresh_prefix() -> str:
    return f"t-{uuid.uuid4().hex[:16]}"


async def drop_prefix(client: Redis, prefix: str) -> int:
    """Delete every key of a driver's prefix; answers how many."""
    dropped = 0
    async for key in client.scan_iter(match="{" + prefix + "}:*", count=1000):
        dropped += await client.delete(key)
    return dropped


async def open_driver(prefix: str | None = None) -> RedisJobDriver:
    return redis_job_driver(REDIS_URL, prefix=prefix or fresh_prefix())


async def close_driver(driver: RedisJobDriver) -> None:
    try:
        await drop_prefix(driver.client, driver.prefix)
    finally:
        await driver.close()


@pytest.fixture
async def driver() -> AsyncIterator[RedisJobDriver]:
    d = await open_driver()
    try:
        yield d
    finally:
        await close_driver(d)


def request(
    name: str = "send",
    *,
    key: str | None = None,
    queue: str = "default",
    payload: object = None,
    max_attempts: int = 3,
    tenant_id: str | None = None,
    delay_ms: int | None = None,
    run_at_ms: int | None = None,
    id: str | None = None,
    concurrency_key: str | None = None,
) -> EnqueueRequest:
    return EnqueueRequest(
        id=id or new_id(),
        run_id=new_id(),
        name=name,
        queue=queue,
        payload={"n": 1} if payload is None else payload,
        idempotency_key=key or new_id(),
        max_attempts=max_attempts,
        tenant_id=tenant_id,
        concurrency_key=concurrency_key,
        delay_ms=delay_ms,
        run_at_ms=run_at_ms,
    )
