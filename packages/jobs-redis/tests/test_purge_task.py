"""x.purge over real Redis: the scheduler's built-in hourly task runs the driver's purge script
with its retention (1 ms / 1 h here): the done rows go, the dead one and the live one stay."""

from __future__ import annotations

from datetime import UTC, datetime

from ultimat3.core import FrozenClock, new_id
from ultimat3.jobs import task_scheduler
from ultimat3.jobs._process.purge import PURGE_TASK
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs_redis import RedisJobDriver


def req(i: int) -> EnqueueRequest:
    return EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name="kept",
        queue="q",
        payload={"i": i},
        idempotency_key=f"k{i}",
        max_attempts=3,
    )


async def test_the_scheduler_purges_finished_rows_past_their_retention(
    driver: RedisJobDriver,
) -> None:
    rows = [req(i) for i in range(4)]
    await driver.enqueue_many(rows)
    held = await driver.claim(queues=["q"], limit=3, worker_id="w", visibility_timeout_ms=60_000)
    ids = [h.id for h in held]
    for h in held[:2]:
        assert await driver.ack(h.id, worker_id="w", claim=h.claim)
    assert await driver.nack(held[2].id, worker_id="w", claim=held[2].claim, outcome="dead")
    clock = FrozenClock(datetime.now(UTC).replace(minute=0, second=10, microsecond=0))
    s = task_scheduler(
        tasks=[], driver=driver, clock=clock, done_retention="1ms", dead_retention="1h"
    )
    try:
        await s.tick()
        assert s.leading
        assert await s.purge_done() == 2
    finally:
        await s.stop()
    left = {r.id: r.state for r in await driver.introspect.list()}
    assert set(left) == {r.id for r in rows} - set(ids[:2])
    assert left[ids[2]] == "dead"
    assert [f.task for f in await driver.introspect.task_fires()] == [PURGE_TASK]
