"""The wake listener (over the driver's lean subscription, and over a redis-py client passed in):
a worker polling slowly still picks a job up within milliseconds, only for the queues it serves;
the listener rides out a Redis restart and subscribes with the URL's password; a refusal names
what is wrong."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import XError, capture_log_events, swap_adapter
from ultimat3.jobs import job, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER, EnqueueRequest, memory_job_driver
from ultimat3.jobs_redis import RedisJobDriver, redis_job_driver, redis_wake_listener

Req = Callable[..., EnqueueRequest]


class At(BaseModel):
    at: float


async def until(what: str, ready: Callable[[], bool], *, seconds: float = 10) -> None:
    for _ in range(int(seconds * 200)):
        if ready():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"waited {seconds}s for {what}")


async def test_an_idle_worker_is_woken_the_moment_a_job_is_due(either: RedisJobDriver) -> None:
    driver = either
    picked: list[float] = []

    async def body(input: At, step: Any, ctx: Any) -> None:
        picked.append(time.time() - input.at)

    echo = job(input=At, idempotency_key=lambda i: repr(i.at), name="echo", run=body)
    worker = job_worker(jobs=[echo], driver=driver, poll_interval_ms=5_000,
                        idle_poll_max_ms=10_000, handle_signals=False)  # fmt: skip
    with swap_adapter(JOB_DRIVER, driver):
        await worker.start()
        try:
            async with redis_wake_listener(driver, worker.wake, queues=worker.queues):
                await asyncio.sleep(0.1)  # the worker's first (empty) pass is behind it
                for n in range(1, 6):
                    await echo.enqueue({"at": time.time()})

                    def picked_up(n: int = n) -> bool:
                        return len(picked) == n

                    await until("the pickup", picked_up, seconds=3)
        finally:
            await worker.stop()
    assert max(picked) < 0.5, picked


async def test_a_listener_wakes_only_for_its_queues_and_every_due_making_change(
    either: RedisJobDriver, req: Req
) -> None:
    driver = either
    pokes: list[int] = []
    listener = redis_wake_listener(driver, lambda: pokes.append(1), queues=["mail"])
    await listener.start()
    try:
        await until("the first wake after subscribing", lambda: listener.woken == 1)
        await driver.enqueue(req(queue="other"))
        await asyncio.sleep(0.1)
        assert listener.woken == 1
        # delayed: announced too, so the worker's claim reads when it falls due (its due timer)
        await driver.enqueue(req(queue="mail", delay_ms=60_000))
        await until("the delayed enqueue's wake", lambda: listener.woken == 2)
        await driver.enqueue_many([req(queue="mail"), req(queue="mail")])  # one announce
        await until("the enqueue wake", lambda: listener.woken == 3)
        (job,) = await driver.claim(queues=["mail"], limit=1, worker_id="w",
                                    visibility_timeout_ms=60_000)  # fmt: skip
        assert await driver.nack(job.id, worker_id="w", claim=job.claim, outcome="release")
        await until("the release wake", lambda: listener.woken == 4)
        await driver.introspect.pause_queue("mail")
        await driver.introspect.resume_queue("mail")
        await until("the resume wake", lambda: listener.woken == 5)
    finally:
        await listener.stop()
    assert len(pokes) == listener.woken == 5


async def test_the_listener_rides_out_a_redis_restart(redis_server: Any, req: Req) -> None:
    own = redis_job_driver(redis_server.url)
    listener = redis_wake_listener(own, lambda: None)
    try:
        with capture_log_events() as events:
            await listener.start()
            await until("subscribed", lambda: listener.woken == 1)
            await asyncio.to_thread(redis_server.kill)
            await until(
                "the unavailable log",
                lambda: any(e["event"] == "jobs.driver.unavailable" for e in events),
            )
            await asyncio.to_thread(redis_server.start)
            await until("subscribed again", lambda: listener.woken == 2, seconds=15)
            await own.enqueue(req())
            await until("the wake after the restart", lambda: listener.woken == 3)
    finally:
        await listener.stop()
        await own.close()


async def test_the_listener_subscribes_with_the_password_and_logs_a_wrong_one(
    locked_server: Any, req: Req
) -> None:
    good = redis_job_driver(locked_server.url.replace("s3cret pass", "s3cret%20pass"))
    bad = redis_job_driver(locked_server.url.replace("s3cret pass", "wrong"))
    listener = redis_wake_listener(good, lambda: None)
    refused = redis_wake_listener(bad, lambda: None)
    try:
        with capture_log_events() as events:
            await listener.start()
            await refused.start(timeout_s=0.3)
            await until("subscribed", lambda: listener.woken == 1)
            await good.enqueue(req())
            await until("the wake", lambda: listener.woken == 2)
            await until(
                "the refusal logged",
                lambda: any(e["event"] == "jobs.driver.unavailable" for e in events),
            )
        assert refused.woken == 0
        logged = next(e for e in events if e["event"] == "jobs.driver.unavailable")
        assert "AuthenticationError" in logged["error"] and "wrong" not in logged["error"]
    finally:
        await listener.stop()
        await refused.stop()
        await good.close()
        await bad.close()


def test_a_listener_for_something_else_is_refused() -> None:
    with pytest.raises(XError) as caught:
        redis_wake_listener(memory_job_driver(), lambda: None)  # type: ignore[arg-type]
    assert caught.value.code == "X_CONFIG_INVALID"
    assert "MemoryJobDriver" in caught.value.message


async def test_a_wake_that_cannot_be_called_is_refused(driver: RedisJobDriver) -> None:
    with pytest.raises(XError) as caught:
        redis_wake_listener(driver, "worker.wake")  # type: ignore[arg-type]
    assert caught.value.code == "X_CONFIG_INVALID" and "'worker.wake'" in caught.value.message
