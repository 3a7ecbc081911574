"""Retention: the built-in hourly ``x.purge`` the scheduler carries deletes finished rows past
``done_retention`` / ``dead_retention`` (its own settings), fires once an hour fleet-wide with a
watermark like any task, can be paused, dropped (``purge=False``) or refused when misconfigured.
On the memory driver under a FrozenClock; over real Postgres and Redis in their own folders."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ultimat3.core import FrozenClock, XError, capture_log_events, new_id
from ultimat3.jobs import run_jobs, task, task_scheduler
from ultimat3.jobs._process.purge import PURGE_TASK, purge_task
from ultimat3.jobs.adapter import DEAD_RETENTION_MS, DONE_RETENTION_MS, EnqueueRequest
from ultimat3.jobs.memory import MemoryJobDriver, memory_job_driver

START = datetime(2026, 6, 1, 12, 5, 30, tzinfo=UTC)


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


async def finish(driver: MemoryJobDriver, outcome: str) -> str:
    r = req(len(await driver.introspect.list(limit=200)))
    await driver.enqueue(r)
    [held] = await driver.claim(queues=["q"], limit=1, worker_id="w", visibility_timeout_ms=60_000)
    if outcome == "done":
        assert await driver.ack(held.id, worker_id="w", claim=held.claim)
    else:
        assert await driver.nack(held.id, worker_id="w", claim=held.claim, outcome="dead")
    return r.id


async def ids(driver: MemoryJobDriver) -> set[str]:
    return {r.id for r in await driver.introspect.list(limit=200)}


async def test_the_scheduler_purges_hourly_with_its_retention() -> None:
    clock = FrozenClock(START)
    driver = memory_job_driver(clock=clock)
    old_done, old_dead = await finish(driver, "done"), await finish(driver, "dead")
    clock.advance("13d")
    new_done, new_dead = await finish(driver, "done"), await finish(driver, "dead")
    clock.advance("2d")  # old rows finished 15 days ago, new ones 2 days ago
    s = task_scheduler(tasks=[], driver=driver, clock=clock, dead_retention="10d")
    assert s.retention is not None
    assert (s.retention.done_ms, s.retention.dead_ms) == (DONE_RETENTION_MS, 10 * 86_400_000)
    assert [t.name for t in s.tasks] == [PURGE_TASK]
    with capture_log_events() as events:
        await s.tick()  # takes the lead at 12:05:30; x.purge next fires at 13:00
        assert s.leading and await s.purge_done() is None
        clock.advance("54m29s")
        await s.tick()
        assert await s.purge_done() is None, "not before the top of the hour"
        clock.advance("1s")
        await s.tick()
        assert await s.purge_done() == 2
        assert await ids(driver) == {new_done, new_dead}
        clock.advance("30m")
        await s.tick()
        [done] = [e for e in events if e["event"] == "jobs.purge.done"]
        assert done["deleted"] == 2 and done["dead_retention_ms"] == 10 * 86_400_000
        assert done["level"] == "info"
    assert [f.task for f in await driver.introspect.task_fires()] == [PURGE_TASK]
    await s.stop()
    assert old_done not in await ids(driver) and old_dead not in await ids(driver)


async def test_a_paused_purge_keeps_the_rows_and_purge_false_drops_the_task() -> None:
    clock = FrozenClock(START)
    driver = memory_job_driver(clock=clock)
    await finish(driver, "done")
    clock.advance("15d")
    await driver.introspect.pause_task(PURGE_TASK)
    s = task_scheduler(tasks=[], driver=driver, clock=clock)
    for _ in range(6 * 56):
        await s.tick()
        clock.advance("10s")
    assert s.leading and await s.purge_done() is None and len(await ids(driver)) == 1
    await s.stop()
    tick = task(name="t", cron="@daily", enqueue=lambda at: [])
    assert [t.name for t in task_scheduler(tasks=[tick], purge=False).tasks] == ["t"]
    assert task_scheduler(tasks=[tick], purge=False).retention is None


async def test_a_driver_without_purge_logs_it_and_keeps_ticking() -> None:
    clock = FrozenClock(START)
    inner = memory_job_driver(clock=clock)

    class NoPurge:
        name = "nopurge"

        def __getattr__(self, name: str) -> Any:
            if name == "purge":
                raise AttributeError(name)
            return getattr(inner, name)

    s = task_scheduler(tasks=[], driver=NoPurge(), clock=clock)
    with capture_log_events() as events:
        for _ in range(6 * 56):  # 12:05:30 -> 13:01:30, ticking every 10 s
            await s.tick()
            clock.advance("10s")
        assert s.leading and await s.purge_done() is None
    [said] = [e for e in events if e["event"] == "jobs.purge.unsupported"]
    assert said["driver"] == "nopurge" and said["level"] == "warning"
    await s.stop()


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"done_retention": "soon"}, "done_retention"),
        ({"dead_retention": 0}, "dead_retention"),
        ({"purge": False, "done_retention": "1d"}, "purge=False"),
        ({"purge": "yes"}, "purge"),
        ({"tasks": [purge_task()]}, PURGE_TASK),
    ],
)
def test_retention_settings_are_refused_when_malformed(kwargs: dict[str, Any], said: str) -> None:
    kwargs.setdefault("tasks", [])
    with pytest.raises(XError) as caught:
        task_scheduler(**kwargs)
    assert caught.value.code == "X_CONFIG_INVALID"
    assert said in caught.value.message and caught.value.fix


async def test_run_jobs_passes_the_retention_to_its_scheduler() -> None:
    tick = task(name="t", cron="@daily", enqueue=lambda at: [])
    driver = memory_job_driver()
    async with run_jobs(
        jobs=[tick], driver=driver, worker=False, scheduler=True, done_retention="1d"
    ) as running:
        assert running.scheduler is not None and running.scheduler.retention is not None
        assert running.scheduler.retention.done_ms == 86_400_000
        assert running.scheduler.retention.dead_ms == DEAD_RETENTION_MS
