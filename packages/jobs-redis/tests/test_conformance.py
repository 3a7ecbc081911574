"""The Redis driver against the whole driver contract (``JobDriverConformance``), on the real
redis-server; each test on a key prefix of its own, deleted afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from ultimat3.jobs.adapter import JobDriver
from ultimat3.jobs.testing import JobDriverConformance
from ultimat3.jobs_redis import RedisJobDriver, redis_job_driver

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


class TestRedisDriver(JobDriverConformance):
    async def make_driver(self) -> JobDriver:
        return redis_job_driver(REDIS_URL, prefix=f"t-{uuid.uuid4().hex[:16]}")

    @pytest.fixture
    async def driver(self) -> AsyncIterator[JobDriver]:
        made = await self.make_driver()
        assert isinstance(made, RedisJobDriver)
        try:
            yield made
        finally:
            try:
                async for key in made.client.scan_iter(match="{" + made.prefix + "}:*"):
                    await made.client.delete(key)
            finally:
                await made.close()


class TestRedisDriverOnAClientYouMade(JobDriverConformance):
    """The same contract through a ``redis.asyncio.Redis`` the app made and owns, one that
    decodes responses to ``str`` (the driver reads bytes and str alike)."""

    async def make_driver(self) -> JobDriver:
        client = Redis.from_url(REDIS_URL, decode_responses=True, socket_connect_timeout=0.5)
        return redis_job_driver(client, prefix=f"t-{uuid.uuid4().hex[:16]}")

    @pytest.fixture
    async def driver(self) -> AsyncIterator[JobDriver]:
        made = await self.make_driver()
        assert isinstance(made, RedisJobDriver)
        try:
            yield made
        finally:
            try:
                async for key in made.client.scan_iter(match="{" + made.prefix + "}:*"):
                    await made.client.delete(key)
            finally:
                await made.close()  # not the client: it is the app's
                await made.client.aclose()
