"""``await job.result(id)`` over Redis: the driver has no settle push, so the row is re-read
with a backoff (10 ms doubling to 500 ms) until it settles — the result, the dead run's error and
the timeout, against the real server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import XError, swap_adapter
from ultimat3.jobs import Retry, job, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER, driver_settle_watch
from ultimat3.jobs_redis import RedisJobDriver


class N(BaseModel):
    n: int


async def _triple(input: N, step: Any, ctx: Any) -> int:
    if input.n < 0:
        raise XError("X_INVARIANT", f"{input.n} is negative")
    return input.n * 3


triple = job(
    input=N, idempotency_key=lambda i: f"t:{i.n}", name="redis.triple", run=_triple,
    retry=Retry(attempts=1),
)  # fmt: skip


async def test_result_over_redis_answers_the_result_raises_the_error_and_times_out(
    driver: RedisJobDriver,
) -> None:
    assert driver_settle_watch(driver) is None  # re-read with a backoff
    with swap_adapter(JOB_DRIVER, driver):
        ok = await triple.enqueue({"n": 4})
        bad = await triple.enqueue({"n": -1})
        waiting = asyncio.ensure_future(triple.result(ok.id, timeout="20s"))
        with pytest.raises(XError) as early:
            await triple.result(ok.id, timeout="100ms")
        assert early.value.code == "X_JOB_RESULT_TIMEOUT"
        worker = job_worker(jobs=[triple], driver=driver, poll_interval_ms=5)
        await worker.start()
        try:
            assert await asyncio.wait_for(waiting, timeout=25) == 12
            with pytest.raises(XError) as dead:
                await triple.result(bad.id, timeout="20s")
        finally:
            await worker.stop()
    assert dead.value.code == "X_INVARIANT" and dead.value.meta["state"] == "dead"
