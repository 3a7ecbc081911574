"""``RedisJobDriver.start_wake``: the driver offers the port's optional ``QueueWake``, so
``job_worker(...).start()`` starts the pub/sub listener itself and stops it with the worker."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import BaseModel

from ultimat3.core import swap_adapter
from ultimat3.jobs import job, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER, QueueWake
from ultimat3.jobs_redis import RedisJobDriver
from ultimat3.jobs_redis._wake import RedisWakeListener


class At(BaseModel):
    at: float


async def test_start_wake_answers_a_started_listener(driver: RedisJobDriver) -> None:
    assert isinstance(driver, QueueWake)
    woken: list[str] = []
    listener = await driver.start_wake(woken.append, queues=["mail"])
    try:
        assert isinstance(listener, RedisWakeListener)
        for _ in range(200):
            if woken:
                break
            await asyncio.sleep(0.01)
        assert woken == ["*"]  # the catch-up wake after subscribing names no queue
    finally:
        await listener.stop()


async def test_a_worker_starts_and_stops_the_listener_itself(driver: RedisJobDriver) -> None:
    picked: list[float] = []

    async def body(input: At, step: Any, ctx: Any) -> None:
        picked.append(time.time() - input.at)

    echo = job(input=At, idempotency_key=lambda i: repr(i.at), name="echo", run=body)
    worker = job_worker(jobs=[echo], driver=driver, poll_interval_ms=5_000,
                        idle_poll_max_ms=10_000, handle_signals=False)  # fmt: skip
    with swap_adapter(JOB_DRIVER, driver):
        await worker.start()
        try:
            listener = worker._queue_wake
            assert isinstance(listener, RedisWakeListener)
            await asyncio.sleep(0.1)  # the worker's first (empty) pass is behind it
            await echo.enqueue({"at": time.time()})
            for _ in range(300):
                if picked:
                    break
                await asyncio.sleep(0.01)
        finally:
            await worker.stop()
    assert picked and picked[0] < 1.0, picked  # the listener, not the 5 s poll
    assert worker._queue_wake is None
    assert listener._task is None  # stopped
