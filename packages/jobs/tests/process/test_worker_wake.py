"""The worker wires its driver's optional members: the wake (``QueueWake.start_wake``) started by
``start()`` and stopped with the worker, its proof stretching the idle poll to 5 s, and the
driver's own event bus (``event_bus()``) as the default for ``step.wait_for_event``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection
from typing import Any

import psycopg
from pydantic import BaseModel

from ultimat3.core import capture_log_events, swap_adapter
from ultimat3.jobs import JobContext, JobWorker, Step, job, job_worker
from ultimat3.jobs.adapter import (
    JOB_DRIVER,
    DriverEventBus,
    QueueWake,
    driver_event_bus,
    driver_wake,
)
from ultimat3.jobs.memory import MemoryJobDriver, memory_job_driver
from ultimat3.jobs.postgres import PostgresJobDriver, postgres_event_bus


class N(BaseModel):
    n: int


class Approved(BaseModel):
    by: str


async def until(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


def wake_proven(worker: JobWorker) -> bool:
    """``worker.wake_proven`` read through a call, so mypy does not keep the property narrowed
    by an assert across the awaits that change it."""
    return worker.wake_proven


class Handle:
    def __init__(self, on_wake: Callable[[str], object], queues: list[str] | None) -> None:
        self.on_wake = on_wake
        self.queues = queues
        self.proven = False
        self.stopped = False

    async def stop(self) -> None:
        self.stopped = True


class WakingDriver:
    """The memory driver, plus a wake a test fires by hand."""

    def __init__(self, inner: MemoryJobDriver, *, fail: bool = False) -> None:
        self.inner = inner
        self.handles: list[Handle] = []
        self.fail = fail

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def start_wake(
        self, on_wake: Callable[[str], object], *, queues: Collection[str] | None = None
    ) -> Handle:
        if self.fail:
            raise ConnectionError("no LISTEN for you")
        handle = Handle(on_wake, None if queues is None else list(queues))
        self.handles.append(handle)
        return handle


def counting_job(seen: list[int]) -> Any:
    async def body(input: N, step: Step, ctx: JobContext) -> None:
        seen.append(input.n)

    return job(input=N, idempotency_key=lambda i: str(i.n), name="woken", queue="q", run=body)


def test_the_optional_members_are_declared() -> None:
    memory = memory_job_driver()
    assert driver_wake(memory) is memory  # its enqueues wake an idle worker in-process
    assert isinstance(memory, DriverEventBus)
    assert driver_event_bus(memory) is memory.event_bus() is memory.event_bus()
    assert isinstance(WakingDriver(memory), QueueWake)


async def test_start_starts_the_wake_and_stop_stops_it() -> None:
    driver = WakingDriver(memory_job_driver())
    seen: list[int] = []
    woken = counting_job(seen)
    worker = job_worker(
        jobs=[woken],
        driver=driver,
        poll_interval_ms=5000,
        idle_poll_max_ms=5000,
        handle_signals=False,
    )
    with swap_adapter(JOB_DRIVER, driver.inner):
        await worker.start()
        try:
            [handle] = driver.handles
            assert handle.queues == ["q"]
            assert not wake_proven(worker)
            await asyncio.sleep(0.05)  # the first (empty) pass is behind it
            await woken.enqueue({"n": 1})
            await asyncio.sleep(0.05)
            assert seen == []  # polling alone waits 5 s
            handle.on_wake("q")  # what the driver's push calls
            await until(lambda: seen == [1], timeout_s=1.0)
            handle.proven = True
            assert worker.wake_proven
        finally:
            await worker.stop()
    assert handle.stopped
    assert worker.wake_proven is False


async def test_a_proven_wake_stretches_the_idle_poll_to_five_seconds() -> None:
    driver = WakingDriver(memory_job_driver())
    worker = job_worker(
        jobs=[counting_job([])],
        driver=driver,
        poll_interval_ms=100,
        idle_poll_max_ms=2000,
        handle_signals=False,
    )
    await worker.start()
    try:
        [handle] = driver.handles
        assert worker._idle_max() == 2.0
        handle.proven = True
        assert worker._idle_max() == 5.0
    finally:
        await worker.stop()
    roomy = job_worker(
        jobs=[counting_job([])],
        driver=driver,
        idle_poll_max_ms=9000,
        handle_signals=False,
    )
    await roomy.start()
    try:
        driver.handles[-1].proven = True
        assert roomy._idle_max() == 9.0  # never below the configured ceiling
    finally:
        await roomy.stop()


async def test_a_wake_that_fails_to_start_leaves_the_worker_polling() -> None:
    driver = WakingDriver(memory_job_driver(), fail=True)
    seen: list[int] = []
    woken = counting_job(seen)
    worker = job_worker(
        jobs=[woken],
        driver=driver,
        poll_interval_ms=20,
        idle_poll_max_ms=40,
        handle_signals=False,
    )
    with capture_log_events() as events, swap_adapter(JOB_DRIVER, driver.inner):
        await worker.start()
        try:
            await woken.enqueue({"n": 7})
            await until(lambda: seen == [7])
        finally:
            await worker.stop()
    [lost] = [e for e in events if e["event"] == "jobs.wake.lost"]
    assert "no LISTEN for you" in lost["error"]


async def test_a_wait_with_no_bus_uses_the_drivers_own() -> None:
    driver = memory_job_driver()

    @job(input=N, idempotency_key=lambda i: str(i.n), name="awaits")
    async def awaits(input: N, step: Step, ctx: JobContext) -> str | None:
        got = await step.wait_for_event("ok", "approved", schema=Approved, timeout="1h")
        return None if got is None else got.by

    worker = job_worker(jobs=[awaits], driver=driver, poll_interval_ms=20, handle_signals=False)
    with swap_adapter(JOB_DRIVER, driver):
        queued = await awaits.enqueue({"n": 1})
        await worker.start()
        try:
            await until(lambda: worker.stats().suspended == 1)
            await driver.event_bus().publish("approved", {"by": "ana"})
            await until(lambda: worker.stats().completed == 1)
        finally:
            await worker.stop()
    row = await driver.introspect.show(queued.id)
    assert (row.state, row.result) == ("done", "ana")


# --- on Postgres ------------------------------------------------------------------------------


async def test_a_worker_on_postgres_picks_a_job_up_through_its_own_wake(
    pg_driver: PostgresJobDriver,
) -> None:
    seen: list[float] = []

    class At(BaseModel):
        at: float

    async def body(input: At, step: Step, ctx: JobContext) -> None:
        seen.append(time.monotonic() - input.at)

    timed = job(input=At, idempotency_key=lambda i: repr(i.at), name="timed", run=body)
    worker = job_worker(
        jobs=[timed],
        driver=pg_driver,
        poll_interval_ms=5000,
        idle_poll_max_ms=5000,
        handle_signals=False,
    )
    with swap_adapter(JOB_DRIVER, pg_driver):
        await worker.start()
        try:
            assert worker._queue_wake is not None
            await until(lambda: worker.wake_proven)
            await asyncio.sleep(0.2)  # idle: the next poll is ~5 s away
            await timed.enqueue({"at": time.monotonic()})
            await until(lambda: len(seen) == 1, timeout_s=3.0)
        finally:
            await worker.stop()
    assert seen[0] < 1.0, seen  # the wake, not the 5 s poll
    assert worker._queue_wake is None


async def test_a_worker_on_postgres_waits_on_the_postgres_bus_by_default(
    pg_driver: PostgresJobDriver,
) -> None:
    assert isinstance(pg_driver.event_bus(), type(postgres_event_bus(pg_driver)))
    assert pg_driver.event_bus() is pg_driver.event_bus()

    @job(input=N, idempotency_key=lambda i: str(i.n), name="pg_awaits")
    async def pg_awaits(input: N, step: Step, ctx: JobContext) -> str | None:
        got = await step.wait_for_event("ok", "approved", schema=Approved, timeout="1h")
        return None if got is None else got.by

    worker = job_worker(jobs=[pg_awaits], driver=pg_driver, handle_signals=False)
    with swap_adapter(JOB_DRIVER, pg_driver):
        queued = await pg_awaits.enqueue({"n": 1})
        await worker.start()
        try:
            await until(lambda: worker.stats().suspended == 1)
            await postgres_event_bus(pg_driver).publish("approved", {"by": "bo"})
            await until(lambda: worker.stats().completed == 1)  # woken by the publish
        finally:
            await worker.stop()
    row = await pg_driver.introspect.show(queued.id)
    assert (row.state, row.result) == ("done", "bo")


async def test_on_postgres_a_wait_that_suspends_before_the_publish_commits_resumes_at_the_commit(
    pg_driver: PostgresJobDriver, database_url: str
) -> None:
    """The publish's own UPDATE runs before the run suspends, so it cannot wake it: the commit
    must (its notification), not the 15-min backstop poll."""

    @job(input=N, idempotency_key=lambda i: str(i.n), name="pg_awaits_late")
    async def pg_awaits_late(input: N, step: Step, ctx: JobContext) -> str | None:
        got = await step.wait_for_event("ok", "approved.late", schema=Approved, timeout="1h")
        return None if got is None else got.by

    worker = job_worker(
        jobs=[pg_awaits_late],
        driver=pg_driver,
        poll_interval_ms=5000,
        idle_poll_max_ms=5000,
        handle_signals=False,
    )
    bus = postgres_event_bus(pg_driver)
    with swap_adapter(JOB_DRIVER, pg_driver):
        async with await psycopg.AsyncConnection.connect(database_url) as app:
            await bus.publish("approved.late", {"by": "cy"}, connection=app)  # not committed
            queued = await pg_awaits_late.enqueue({"n": 1})
            await worker.start()
            try:
                await until(lambda: worker.wake_proven)
                await until(lambda: worker.stats().suspended == 1)
                row = await pg_driver.introspect.show(queued.id)
                assert row.state == "suspended"
                await app.commit()
                committed = time.monotonic()
                await until(lambda: worker.stats().completed == 1, timeout_s=10.0)
                resumed_after = time.monotonic() - committed
            finally:
                await worker.stop()
    row = await pg_driver.introspect.show(queued.id)
    assert (row.state, row.result) == ("done", "cy")
    assert resumed_after < 2.0, resumed_after  # the commit woke it, not a poll


async def test_without_a_bus_anywhere_a_wait_still_names_the_fix() -> None:
    class Busless:
        """A driver with no bus of its own."""

        def __init__(self) -> None:
            self.inner = memory_job_driver()

        def __getattr__(self, name: str) -> Any:
            if name == "event_bus":
                raise AttributeError(name)
            return getattr(self.inner, name)

    driver = Busless()

    @job(input=N, idempotency_key=lambda i: str(i.n), name="busless")
    async def busless(input: N, step: Step, ctx: JobContext) -> None:
        await step.wait_for_event("ok", "approved", schema=Approved)

    worker = job_worker(jobs=[busless], driver=driver, poll_interval_ms=20, handle_signals=False)
    with swap_adapter(JOB_DRIVER, driver.inner):
        queued = await busless.enqueue({"n": 1})
        await worker.start()
        try:
            await until(lambda: worker.stats().retried + worker.stats().dead_lettered >= 1)
        finally:
            await worker.stop()
    row = await driver.inner.introspect.show(queued.id)
    assert row.last_error is not None and row.last_error["code"] == "X_ADAPTER_MISSING"
