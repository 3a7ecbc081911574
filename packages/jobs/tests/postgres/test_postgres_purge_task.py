"""x.purge over real Postgres: the scheduler's built-in hourly task deletes the finished rows past
its retention (set here to 1 ms / 1 h) in its set-based batches, keeps the live and the recent
dead, and records its fire like any task."""

from __future__ import annotations

from datetime import UTC, datetime

from ultimat3.core import FrozenClock, new_id
from ultimat3.jobs import task_scheduler
from ultimat3.jobs._process.purge import PURGE_TASK
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.postgres import PostgresJobDriver


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
    pg_driver: PostgresJobDriver,
) -> None:
    rows = [req(i) for i in range(4)]
    await pg_driver.enqueue_many(rows)
    held = await pg_driver.claim(queues=["q"], limit=3, worker_id="w", visibility_timeout_ms=60_000)
    by_id = {h.id: h for h in held}
    done = [r.id for r in rows if r.id in by_id][:2]
    [dead] = [r.id for r in rows if r.id in by_id][2:]
    for job_id in done:
        assert await pg_driver.ack(job_id, worker_id="w", claim=by_id[job_id].claim)
    assert await pg_driver.nack(dead, worker_id="w", claim=by_id[dead].claim, outcome="dead")
    # ten seconds past the top of an hour: that occurrence is on time, so the lead fires it
    clock = FrozenClock(datetime.now(UTC).replace(minute=0, second=10, microsecond=0))
    s = task_scheduler(
        tasks=[], driver=pg_driver, clock=clock, done_retention="1ms", dead_retention="1h"
    )
    try:
        await s.tick()
        assert s.leading
        assert await s.purge_done() == 2
    finally:
        await s.stop()
    left = {r.id: r.state for r in await pg_driver.introspect.list()}
    assert set(left) == {r.id for r in rows} - set(done), "the done rows went, the rest stayed"
    assert left[dead] == "dead"
    [fire] = await pg_driver.introspect.task_fires()
    assert fire.task == PURGE_TASK
