"""Fixtures of the reliability tests: ``any_driver``, one real driver of each kind (memory, a
Postgres schema of the test's own, a Redis key prefix of the test's own), installed as the job
driver; each is dropped afterwards. Every address is loopback."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ultimat3.core import swap_adapter
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.memory import memory_job_driver
from ultimat3.jobs.postgres import migrate, postgres_job_driver
from ultimat3.jobs_redis import redis_job_driver
from ultimat3_testkit.engine_drivers import drop_schema

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
DRIVERS = ("memory", "postgres", "redis")


async def _drop_redis_prefix(driver: Any) -> None:
    async for key in driver.client.scan_iter(match="{" + driver.prefix + "}:*", count=1000):
        await driver.client.delete(key)


@pytest.fixture(params=DRIVERS)
async def any_driver(request: pytest.FixtureRequest, database_url: str) -> AsyncIterator[Any]:
    """The job driver of one kind, installed for the test."""
    kind = request.param
    if kind == "memory":
        memory = memory_job_driver()
        with swap_adapter(JOB_DRIVER, memory):
            yield memory
        return
    if kind == "postgres":
        schema = f"x_rel_{uuid.uuid4().hex[:12]}"
        await migrate(database_url, schema=schema)
        pg = postgres_job_driver(database_url, schema=schema)
        try:
            with swap_adapter(JOB_DRIVER, pg):
                yield pg
        finally:
            await pg.close()
            await drop_schema(database_url, schema)
        return
    redis = redis_job_driver(REDIS_URL, prefix=f"t-{uuid.uuid4().hex[:16]}")
    try:
        with swap_adapter(JOB_DRIVER, redis):
            yield redis
    finally:
        try:
            await _drop_redis_prefix(redis)
        finally:
            await redis.close()
