"""The due timer (issue 16): a worker knows the earliest due instant among what it has seen — a
claim reads its queues' next one in the same statement, a delayed enqueue wakes it (so it claims
and reads it), a run that suspends says when it wakes — and arms ONE timer for it. A delayed job
and a sleeping run start on time with a poll interval far longer than their delay, and an idle
worker sends nothing between events."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import swap_adapter
from ultimat3.jobs import job, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER, DueReporter
from ultimat3.jobs.memory import memory_job_driver
from ultimat3.jobs.postgres import PostgresJobDriver

LONG_POLL_MS = 60_000
"""Far longer than any delay below: a job that starts on time was started by the timer."""


class N(BaseModel):
    n: int


@pytest.fixture(params=["memory", "postgres"])
def driver(request: pytest.FixtureRequest, pg_driver: PostgresJobDriver) -> Any:
    if request.param == "memory":
        return memory_job_driver()  # the real clock: the timer waits real time
    return pg_driver


def _timed_job(started: dict[int, float], *, sleep: str | None = None) -> Any:
    async def body(input: N, step: Any, ctx: Any) -> int:
        if sleep is not None:
            await step.sleep(sleep)
        started[input.n] = time.monotonic()
        return input.n

    return job(
        input=N, idempotency_key=lambda i: f"due:{i.n}", queue="due", name="due.job", run=body
    )


async def _idle_worker(driver: Any, timed: Any) -> Any:
    worker = job_worker(
        jobs=[timed],
        driver=driver,
        max_in_flight=4,
        poll_interval_ms=LONG_POLL_MS,
        idle_poll_max_ms=LONG_POLL_MS,
    )
    await worker.start()
    deadline = time.monotonic() + 5
    while worker.stats().passes < 1:  # its first pass found nothing: idle from here
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    return worker


async def _until(check: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out: the due timer did not start it"
        await asyncio.sleep(0.01)


async def test_a_delayed_job_is_started_by_the_timer_not_a_poll(driver: Any) -> None:
    started: dict[int, float] = {}
    timed = _timed_job(started)
    worker = await _idle_worker(driver, timed)
    try:
        with swap_adapter(JOB_DRIVER, driver):
            enqueued = time.monotonic()
            await timed.enqueue({"n": 1}, delay="700ms")
        await _until(lambda: 1 in started)
        late = started[1] - enqueued
        assert late >= 0.7 - 0.02  # never early (the database's clock and ours read apart)
        assert late < LONG_POLL_MS / 1000 / 2  # started long before any poll
        assert worker.stats().due_wakes >= 1
    finally:
        await worker.stop()


async def test_a_sleeping_run_is_resumed_by_the_timer_not_a_poll(driver: Any) -> None:
    started: dict[int, float] = {}
    timed = _timed_job(started, sleep="700ms")
    worker = await _idle_worker(driver, timed)
    try:
        with swap_adapter(JOB_DRIVER, driver):
            enqueued = time.monotonic()
            await timed.enqueue({"n": 2})
        await _until(lambda: worker.stats().suspended >= 1)
        await _until(lambda: 2 in started)
        assert started[2] - enqueued >= 0.7 - 0.02
        assert worker.stats().due_wakes >= 1
        await _until(lambda: worker.stats().completed == 1)
    finally:
        await worker.stop()


async def test_an_idle_worker_sends_no_statement_between_events(
    pg_driver: PostgresJobDriver, statements: Counter[str]
) -> None:
    """Statements per idle stretch, as the scheduler's test counts them: the worker's start,
    then nothing until an event; a delayed job costs the claim its wake makes (which reads when
    it falls due) and the claim its timer makes, not a poll every few ms."""
    started: dict[int, float] = {}
    timed = _timed_job(started)
    worker = await _idle_worker(pg_driver, timed)
    try:
        statements.clear()
        await asyncio.sleep(2.0)  # idle: the timer is not armed (nothing is due), no poll
        assert +statements == Counter()
        with swap_adapter(JOB_DRIVER, pg_driver):
            await timed.enqueue({"n": 3}, delay="500ms")
        await _until(lambda: 3 in started)
        await asyncio.sleep(1.0)
        claims = statements["claim"]
        # the wake's, the timer's, the one after the run (and one more should the timer beat
        # the database's clock by a hair): a handful, where a 20 ms poll would send ~75
        assert 2 <= claims <= 6, statements
        statements.clear()
        await asyncio.sleep(2.0)
        assert statements["claim"] == 0, statements
    finally:
        await worker.stop()


def test_every_shipped_driver_reports_the_next_due_instant(pg_driver: PostgresJobDriver) -> None:
    assert isinstance(pg_driver, DueReporter)
    assert isinstance(memory_job_driver(), DueReporter)
