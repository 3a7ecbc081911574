"""``JobHarness``: run jobs in a test on the memory driver under a ``FrozenClock``.

    run_jobs = JobHarness(jobs=[onboard_org])
    await run_jobs(onboard_org, {"org_id": org_id})   # enqueue, then drain
    run_jobs.clock.advance("3d")                        # drives step.sleep
    trace = await run_jobs.drain()
    assert trace.steps["provision"].executions == 1

``drain()`` runs passes until nothing is due. It moves the clock through retry backoffs on its
own (a retry is the runner's business), never through a ``step.sleep``, a ``wait_for_event`` or an
enqueue's ``delay``: those are the test's to advance. Each call binds the harness's clock, driver
and event bus for its duration, so the harness works as a plain object or as ``async with``.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

from ultimat3.core import FrozenClock, XError, swap_adapter, to_epoch_ms, use_clock
from ultimat3.jobs._declare.job import Job
from ultimat3.jobs._process.worker import JobWorker, job_worker
from ultimat3.jobs._run.limiter import ConcurrencyLimiter
from ultimat3.jobs.adapter import (
    EVENT_BUS,
    JOB_DRIVER,
    EnqueueResult,
    JobDetail,
    JobDriver,
    JobIntrospection,
    JobRow,
    driver_introspect,
    job_cursor,
)
from ultimat3.jobs.memory import MemoryEventBus, memory_event_bus, memory_job_driver

JobTrace = JobDetail
"""What a drain answers: the job's row with ``steps[name].executions / .output / .state``."""

DEFAULT_MAX_PASSES = 10_000


class JobHarness:
    """Jobs on the memory driver under a frozen clock: enqueue, drain, advance, read the trace."""

    def __init__(
        self,
        *,
        jobs: Sequence[Job[Any, Any]],
        clock: FrozenClock | None = None,
        driver: JobDriver | None = None,
        event_bus: MemoryEventBus | None = None,
        app: Any = None,
        seed: int = 0,
        visibility_timeout_ms: int = 30_000,
        max_in_flight: int | None = None,
        max_passes: int = DEFAULT_MAX_PASSES,
        limiter: ConcurrencyLimiter | None = None,
    ) -> None:
        self.clock = clock if clock is not None else FrozenClock()
        self.driver: JobDriver = driver if driver is not None else memory_job_driver()
        self.bus = event_bus if event_bus is not None else memory_event_bus(self.driver)
        self.jobs = list(jobs)
        self.worker: JobWorker = job_worker(
            jobs=self.jobs,
            driver=self.driver,
            event_bus=self.bus,
            app=app,
            worker_id="harness",
            visibility_timeout_ms=visibility_timeout_ms,
            max_in_flight=max_in_flight,
            handle_signals=False,
            monotonic=lambda: self.clock.now_ms() / 1000,
            rng=random.Random(seed),
            limiter=limiter,
        )
        self.max_passes = max_passes
        self.enqueued: list[str] = []
        """Ids of the jobs enqueued through the harness, in order."""
        self._stack: contextlib.ExitStack | None = None
        self._checked = False

    # --- ambient binding ----------------------------------------------------------------------

    @contextlib.contextmanager
    def bound(self) -> Iterator[JobHarness]:
        """Make the harness's clock, driver and event bus ambient for a block."""
        with (
            use_clock(self.clock),
            swap_adapter(JOB_DRIVER, self.driver),
            swap_adapter(EVENT_BUS, self.bus),
        ):
            yield self

    async def __aenter__(self) -> JobHarness:
        stack = contextlib.ExitStack()
        stack.enter_context(self.bound())
        self._stack = stack
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()

    # --- driving ------------------------------------------------------------------------------

    async def enqueue(self, job: Job[Any, Any], input: Any, **options: Any) -> EnqueueResult:
        """``job.enqueue(input, **options)`` with the harness ambient."""
        with self.bound():
            result = await job.enqueue(input, **options)
        if result.id not in self.enqueued:
            self.enqueued.append(result.id)
        return result

    async def __call__(self, job: Job[Any, Any], input: Any, **options: Any) -> JobTrace:
        """Enqueue ``input`` and drain; answers that job's trace."""
        result = await self.enqueue(job, input, **options)
        await self.drain()
        return await self.trace(result.id)

    async def drain(self, *, advance_retries: bool = True) -> JobTrace | None:
        """Run passes until nothing is due (moving the clock through retry backoffs unless
        ``advance_retries=False``); answers the trace of the job enqueued last (or ``None``)."""
        with self.bound():
            if not self._checked:
                self.worker.check()
                self._checked = True
            for _ in range(self.max_passes):
                await self.bus.flush()
                found = await self.worker.run_pass()
                await self.worker.wait_idle()
                if found:
                    continue
                if advance_retries:
                    due = await self._next_backoff_ms()
                    if due is not None:
                        self.clock.set(due)
                        continue
                break
            else:
                raise XError(
                    "X_INVARIANT",
                    f"drain ran {self.max_passes} passes and work was still due",
                    fix="a job that re-arms itself forever? raise max_passes= or fix the loop",
                )
        if not self.enqueued:
            return None
        return await self.trace(self.enqueued[-1])

    async def trace(self, job_id: str | None = None) -> JobTrace:
        """The job's row and steps (``job_id`` defaults to the one enqueued last)."""
        if job_id is None:
            if not self.enqueued:
                raise XError("X_INVARIANT", "no job was enqueued through this harness")
            job_id = self.enqueued[-1]
        with self.bound():
            return await self._introspect().show(job_id)

    async def rows(self, **filters: Any) -> list[JobRow]:
        """Every row matching ``introspect.list`` filters, newest first (all pages)."""
        out: list[JobRow] = []
        after: str | None = None
        with self.bound():
            while True:
                page = await self._introspect().list(limit=200, after=after, **filters)
                out.extend(page)
                if len(page) < 200:
                    return out
                after = job_cursor(page[-1])

    async def publish(self, event: str, payload: Any) -> str:
        """Publish an event on the harness's bus (waking its waiters)."""
        with self.bound():
            return await self.bus.publish(event, payload)

    async def requeue(self, job_id: str, *, from_step: str | None = None) -> JobRow:
        """``introspect.requeue`` (the dead letter's replay) with the harness ambient."""
        with self.bound():
            return await self._introspect().requeue(job_id, from_step=from_step)

    # --- internals ----------------------------------------------------------------------------

    def _introspect(self) -> JobIntrospection:
        intro = driver_introspect(self.driver)
        if intro is None:
            raise XError(
                "X_NOT_IMPLEMENTED",
                f"the harness's driver {self.driver.name!r} has no introspect",
                fix="use the memory driver (the default)",
            )
        return intro

    async def _next_backoff_ms(self) -> int | None:
        """The earliest ``run_at`` of a ``ready`` row backing off before a retry (a delayed
        enqueue is ``delayed``, a sleep or a wait ``suspended``: neither is moved through)."""
        now = self.clock.now_ms()
        later = [
            at for row in await self.rows(state="ready") if (at := to_epoch_ms(row.run_at)) > now
        ]
        return min(later) if later else None


def job_harness(
    *,
    jobs: Sequence[Job[Any, Any]],
    clock: FrozenClock | None = None,
    driver: JobDriver | None = None,
    app: Any = None,
    seed: int = 0,
) -> JobHarness:
    """A ``JobHarness``; use it as ``async with job_harness(jobs=[...]) as h:``."""
    return JobHarness(jobs=jobs, clock=clock, driver=driver, app=app, seed=seed)
