"""Issue 16 on Redis: the claim script answers when its queues' next work falls due, a delayed
enqueue publishes on the due channel, and the worker arms ONE timer — a delayed job and a
sleeping run start on time with a poll interval far longer than their delay."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import BaseModel

from ultimat3.core import swap_adapter
from ultimat3.jobs import job, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER, DueReporter
from ultimat3.jobs_redis import RedisJobDriver

LONG_POLL_MS = 60_000


class N(BaseModel):
    n: int


async def _until(check: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out: the due timer did not start it"
        await asyncio.sleep(0.01)


async def test_a_delayed_job_and_a_sleeping_run_are_started_by_the_timer(
    either: RedisJobDriver,
) -> None:
    driver = either
    assert isinstance(driver, DueReporter)
    started: dict[str, float] = {}

    async def body(input: N, step: Any, ctx: Any) -> int:
        if input.n == 2:
            await step.sleep("600ms")
        started[str(input.n)] = time.monotonic()
        return input.n

    timed = job(input=N, idempotency_key=lambda i: f"t:{i.n}", queue="due", name="due.r", run=body)
    worker = job_worker(
        jobs=[timed], driver=driver, poll_interval_ms=LONG_POLL_MS, idle_poll_max_ms=LONG_POLL_MS
    )
    await worker.start()
    try:
        await _until(lambda: worker.stats().passes >= 1)
        await asyncio.sleep(0.2)  # idle from here: the next poll is a minute away
        with swap_adapter(JOB_DRIVER, driver):
            enqueued = time.monotonic()
            await timed.enqueue({"n": 1}, delay="600ms")
            await timed.enqueue({"n": 2})
        await _until(lambda: "1" in started and "2" in started)
        assert started["1"] - enqueued >= 0.6 - 0.02
        assert started["2"] - enqueued >= 0.6 - 0.02
        assert worker.stats().due_wakes >= 1  # both fall due together: one timer may start both
        await _until(lambda: worker.stats().completed == 2)
    finally:
        await worker.stop()
