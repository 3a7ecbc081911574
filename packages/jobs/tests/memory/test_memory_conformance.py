"""The memory driver against the whole driver contract: once on a FrozenClock (time moves when
the suite says so) and once on the real clock (time passes by sleeping), as a server-backed
driver runs it."""

from __future__ import annotations

from ultimat3.core import FrozenClock
from ultimat3.jobs.adapter import JobDriver
from ultimat3.jobs.memory import memory_job_driver
from ultimat3.jobs.testing import JobDriverConformance


class TestMemoryDriverOnAFrozenClock(JobDriverConformance):
    clock: FrozenClock

    async def make_driver(self) -> JobDriver:
        self.clock = FrozenClock()
        return memory_job_driver(clock=self.clock)

    async def advance_clock(self, ms: int) -> bool:
        self.clock.advance(ms)
        return True


class TestMemoryDriverOnTheRealClock(JobDriverConformance):
    async def make_driver(self) -> JobDriver:
        return memory_job_driver()
