"""``step.transaction`` on Redis (#23): refused with ``X_CONFIG_INVALID`` naming the driver and
the way out (``step.run`` with ``step.key``); ``step.key`` works as on every driver."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import swap_adapter
from ultimat3.jobs import Retry, job, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs_redis import RedisJobDriver


class N(BaseModel):
    n: int


@pytest.fixture
async def installed(driver: RedisJobDriver) -> AsyncIterator[RedisJobDriver]:
    with swap_adapter(JOB_DRIVER, driver):
        yield driver


async def test_step_transaction_is_refused_on_redis_and_step_key_is_stable(
    installed: RedisJobDriver,
) -> None:
    keys: list[str] = []

    async def body(input: N, step: Any, ctx: Any) -> None:
        keys.append(step.key("charge"))
        await step.transaction("charge", lambda conn: 1)

    tx = job(
        input=N,
        idempotency_key=lambda i: f"tx:{i.n}",
        name="tx-on-redis",
        retry=Retry(attempts=1),
        run=body,
    )
    queued = await tx.enqueue({"n": 1})
    worker = job_worker(jobs=[tx], poll_interval_ms=10, idle_poll_max_ms=50, handle_signals=False)
    await worker.start()
    try:
        for _ in range(1000):
            row = await installed.introspect.show(queued.id)
            if row.state == "dead":
                break
            await asyncio.sleep(0.02)
    finally:
        await worker.stop()
    assert row.state == "dead"
    assert row.last_error is not None
    assert row.last_error["code"] == "X_CONFIG_INVALID"
    assert "redis" in row.last_error["message"] and "one transaction" in row.last_error["message"]
    assert "step.key" in (row.last_error["fix"] or "")
    assert keys == [f"{queued.id}:charge"]
