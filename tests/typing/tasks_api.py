"""task() and the scheduler: what their types promise (mypy --strict)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, assert_type

from pydantic import BaseModel

from ultimat3.jobs import (
    EnqueueResult,
    SchedulerStats,
    Task,
    TaskOccurrence,
    TaskScheduler,
    job,
    next_task_run,
    task,
    task_scheduler,
)


class Day(BaseModel):
    day: str


@job(input=Day, idempotency_key=lambda i: f"report:{i.day}")
async def report(input: Day, step: Any, ctx: Any) -> None:
    return None


def daily(at: TaskOccurrence) -> tuple[Any, object]:
    assert_type(at.at, datetime)
    assert_type(at.occurrence_ms, int)
    return (report, {"day": at.at.date().isoformat()})


nightly = task(name="reports.nightly", cron="17 3 * * *", tz="Europe/Berlin", enqueue=daily)
assert_type(nightly, Task)
sweeper = task(name="sweep", cron="@hourly", enqueue=report, catch_up="all")
task(name="bad", cron="* * * * *", enqueue=report, catch_up="sometimes")  # type: ignore[arg-type]
task(name="bad", enqueue=report)  # type: ignore[call-arg]
assert_type(next_task_run(nightly, datetime.now(UTC)), datetime)
assert_type(nightly.next_run(0), datetime)


async def scheduling() -> None:
    scheduler = task_scheduler(tasks=[nightly, sweeper])
    assert_type(scheduler, TaskScheduler)
    await scheduler.start()
    assert_type(scheduler.leading, bool)
    assert_type(scheduler.stats(), SchedulerStats)
    await scheduler.stop()
    assert_type(await nightly.enqueue(), list[EnqueueResult])
