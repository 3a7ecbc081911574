"""Tasks over the real Redis server: fire_task moves the watermark and the jobs in one script,
and the scheduler leads, fires and hands over on the Redis lease store."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import XError
from ultimat3.jobs import job, task, task_scheduler
from ultimat3.jobs_redis import RedisJobDriver, redis_job_driver


class Tick(BaseModel):
    at: str


@job(input=Tick, idempotency_key=lambda i: f"tick:{i.at}", queue="ticks")
async def on_tick(input: Tick, step: Any, ctx: Any) -> None:
    return None


MINUTELY = task(
    name="minutely", cron="* * * * *", enqueue=lambda at: (on_tick, {"at": at.at.isoformat()})
)
M0 = int(datetime(2026, 6, 1, 12, tzinfo=UTC).timestamp() * 1000)


def _m(n: int) -> int:
    return M0 + n * 60_000


async def _keys(driver: RedisJobDriver) -> list[str]:
    return sorted(r.idempotency_key for r in await driver.introspect.list(limit=200))


async def test_a_fire_moves_the_watermark_and_the_jobs_in_one_script(
    driver: RedisJobDriver,
) -> None:
    assert await driver.fire_task("minutely", _m(1), MINUTELY.requests(_m(1)))
    (fire,) = await driver.introspect.task_fires()
    assert (fire.task, fire.occurrence_ms) == ("minutely", _m(1))
    assert await _keys(driver) == ["tick:2026-06-01T12:01:00+00:00"]
    assert not await driver.fire_task("minutely", _m(1), MINUTELY.requests(_m(1)))
    assert not await driver.fire_task("minutely", _m(0), MINUTELY.requests(_m(0)))
    assert len(await _keys(driver)) == 1


async def test_a_fires_jobs_dedupe_as_enqueue_does(driver: RedisJobDriver) -> None:
    fan = task(
        name="fan",
        cron="* * * * *",
        enqueue=lambda at: [(on_tick, {"at": "a"}), (on_tick, {"at": "b"}), (on_tick, {"at": "a"})],
    )
    await driver.enqueue(fan.requests(_m(0))[1])  # a live row already holds "b"
    assert await driver.fire_task("fan", _m(1), fan.requests(_m(1)))
    assert await _keys(driver) == ["tick:a", "tick:b"]


async def test_a_bad_request_refuses_the_fire_before_anything_moves(
    driver: RedisJobDriver,
) -> None:
    bad = replace(MINUTELY.requests(_m(1))[0], max_attempts=0)
    with pytest.raises(XError) as exc:
        await driver.fire_task("minutely", _m(1), [*MINUTELY.requests(_m(2)), bad])
    assert exc.value.code == "X_INVARIANT"
    assert await driver.introspect.task_fires() == []
    assert await _keys(driver) == []


class Fast:
    """60x time from M0: a minutely task fires every real second (the lease keeps Redis time)."""

    def __init__(self) -> None:
        self._real0 = time.time()

    def now_ms(self) -> int:
        return M0 - 30_000 + int((time.time() - self._real0) * 60_000)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.now_ms() / 1000, UTC)


async def test_one_scheduler_leads_on_redis_and_a_dead_one_is_replaced_within_a_lease(
    driver: RedisJobDriver,
) -> None:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    drivers = [driver, redis_job_driver(url, prefix=driver.prefix)]
    clock = Fast()
    lease_ms = 1000
    a, b = (
        task_scheduler(
            purge=False,
            tasks=[MINUTELY],
            driver=d,
            clock=clock,
            lease_ms=lease_ms,
            renew_ms=300,
            tick_ms=50,
        )
        for d in drivers
    )
    try:
        await a.start()
        await asyncio.sleep(0.2)
        await b.start()
        for _ in range(20):
            await asyncio.sleep(0.1)
            assert (a.leading, b.leading) == (True, False)
        assert a._loop is not None
        a._loop.cancel()  # a dies: no renewal, no release
        died = time.monotonic()
        while not b.leading:
            await asyncio.sleep(0.05)
            assert time.monotonic() - died < (lease_ms + 600) / 1000  # + a tick, under load
        await asyncio.sleep(1.5)
    finally:
        await b.stop()
        await drivers[1].close()
    keys = await _keys(drivers[0])
    minutes = Counter(keys)
    assert len(minutes) >= 4 and max(minutes.values()) == 1
    (fire,) = await drivers[0].introspect.task_fires()
    assert f"tick:{datetime.fromtimestamp(fire.occurrence_ms / 1000, UTC).isoformat()}" == keys[-1]
    fired = [datetime.fromisoformat(k.removeprefix("tick:")) for k in keys]
    gaps = {(later - earlier).total_seconds() for earlier, later in itertools.pairwise(fired)}
    assert gaps == {60.0}  # each minute once, none skipped by the handover
