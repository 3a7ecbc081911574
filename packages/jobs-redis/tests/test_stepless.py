"""A claimed job that has never recorded a step loads its steps without a round trip (the claim
said so); one that has, or that records one while held, loads them from Redis."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs_redis import RedisJobDriver, redis_job_driver

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def counting(driver: RedisJobDriver) -> list[str]:
    """The names of the scripts the driver runs from now on."""
    ran: list[str] = []
    runner: Any = driver._r
    real = runner.run

    async def run(name: str, *args: Any, op: str | None = None) -> Any:
        ran.append(name)
        return await real(name, *args, op=op)

    runner.run = run
    return ran


async def claim_one(driver: RedisJobDriver) -> Any:
    (claimed,) = await driver.claim(
        queues=["default"], limit=1, worker_id="w", visibility_timeout_ms=30_000
    )
    return claimed


async def test_a_job_without_steps_loads_them_without_a_round_trip(
    driver: RedisJobDriver, req: Callable[..., EnqueueRequest]
) -> None:
    await driver.enqueue(req())
    claimed = await claim_one(driver)
    ran = counting(driver)
    assert await driver.steps.load(claimed.id) == {}
    assert ran == []
    # Recording a step forgets what the claim said: the next load reads Redis.
    assert await driver.steps.record(claimed.id, "a", state="completed", worker_id="w",
                                     claim=claimed.claim, output=1)  # fmt: skip
    loaded = await driver.steps.load(claimed.id)
    assert ran == ["step_record", "steps_load"]
    assert loaded["a"].output == 1


async def test_a_job_with_steps_loads_them_on_its_next_claim_by_any_driver(
    driver: RedisJobDriver, req: Callable[..., EnqueueRequest]
) -> None:
    await driver.enqueue(req())
    first = await claim_one(driver)
    assert await driver.steps.record(first.id, "a", state="completed", worker_id="w",
                                     claim=first.claim, output="kept")  # fmt: skip
    assert await driver.nack(first.id, worker_id="w", claim=first.claim, outcome="retry")
    again = await claim_one(driver)
    assert (again.id, again.attempt) == (first.id, 2)
    assert (await driver.steps.load(again.id))["a"].output == "kept"
    assert await driver.nack(again.id, worker_id="w", claim=again.claim, outcome="release")
    other = redis_job_driver(REDIS_URL, prefix=driver.prefix)  # another process's driver
    try:
        third = await claim_one(other)
        assert third.id == first.id
        assert (await other.steps.load(third.id))["a"].output == "kept"
    finally:
        await other.close()
