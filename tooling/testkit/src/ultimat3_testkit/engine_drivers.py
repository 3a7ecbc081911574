"""The drivers the engine's own tests run over: one parametrised fixture, ``engine``.

``engine`` is ``memory`` — the memory driver under a ``FrozenClock`` (ambient for the test) with
``memory_event_bus`` — or ``postgres`` — a Postgres driver over a migrated schema of the test's own
(dropped afterwards) with ``postgres_event_bus``, its clock the database's. Either way the driver is
installed as ``JOB_DRIVER`` for the test (the event bus is not: a test installs it when it wants it
ambient). ``engine.harness(jobs)`` is a ``JobHarness`` on that driver and bus; on Postgres it is a
``RealTimeHarness``, whose ``drain`` waits the retry backoffs out for real.

A test that drives time with the frozen clock (``clock.advance``) cannot run on Postgres, whose
clock is the database's: such a test stays on the memory driver (saying why), and the behaviour it
proves gets a variant on ``pg_engine`` with real short durations (sleeps of a few hundred ms, retry
delays of 50 ms, visibility windows of ~300-600 ms).

The fixtures reach every test through ``ultimat3_testkit.pytest_plugin`` (a ``pytest11`` entry
point); a test module imports the helpers (``from ultimat3_testkit.engine_drivers import
Engine``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import psycopg
import pytest
from psycopg import sql

from ultimat3.core import (
    Duration,
    FrozenClock,
    XError,
    parse_duration,
    swap_adapter,
    to_epoch_ms,
    use_clock,
)
from ultimat3.jobs import Job, MemoryEventBus, job_worker
from ultimat3.jobs.adapter import EVENT_BUS, JOB_DRIVER
from ultimat3.jobs.memory import MemoryJobDriver, memory_job_driver
from ultimat3.jobs.postgres import (
    PostgresEventBus,
    PostgresJobDriver,
    migrate,
    postgres_job_driver,
)
from ultimat3.jobs.testing import JobHarness
from ultimat3.jobs.testing._harness import JobTrace

ENGINE_DRIVERS: Final = ("memory", "postgres")

EngineDriver = MemoryJobDriver | PostgresJobDriver
EngineBus = MemoryEventBus | PostgresEventBus

REAL_TIME_MARGIN_S: Final = 0.02
"""What a real-time wait adds past the time it waits for: the database and this process read one
host clock, but a statement takes a moment."""


async def make_schema(url: str) -> str:
    """A migrated schema of its own (a unique name, so xdist workers never meet)."""
    schema = f"x_test_{uuid.uuid4().hex[:16]}"
    await migrate(url, schema=schema)
    return schema


async def drop_schema(url: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


class _NoFrozenClock:
    """A real-time harness's ``clock``: any use is a mistake in the test, said loudly."""

    def __getattr__(self, name: str) -> Any:
        raise XError(
            "X_INVARIANT",
            f"clock.{name}: a harness on Postgres has no frozen clock (time is the database's)",
            fix="wait real time (drain_until, asyncio.sleep) or keep the test on the memory driver",
        )


class RealTimeHarness(JobHarness):
    """A ``JobHarness`` on a driver whose clock is real (Postgres). Nothing is frozen: ``drain``
    waits each retry backoff out (up to ``patience_s``), and ``drain_until(state)`` also waits
    out sleeps and event waits. The worker polls every ``poll_interval_ms`` (50 ms), which is
    also how long a run over a ``'wait'`` concurrency cap is handed back for."""

    def __init__(
        self,
        *,
        jobs: Sequence[Job[Any, Any]],
        driver: PostgresJobDriver,
        event_bus: PostgresEventBus,
        app: Any = None,
        seed: int = 0,
        visibility_timeout_ms: int = 30_000,
        max_in_flight: int | None = None,
        max_passes: int = 10_000,
        poll_interval_ms: int = 50,
        patience_s: float = 10.0,
    ) -> None:
        super().__init__(
            jobs=jobs,
            driver=driver,
            event_bus=event_bus,  # type: ignore[arg-type]  # drain below never flushes it
            app=app,
            seed=seed,
            visibility_timeout_ms=visibility_timeout_ms,
            max_in_flight=max_in_flight,
            max_passes=max_passes,
        )
        self.clock = _NoFrozenClock()  # type: ignore[assignment]
        self.worker = job_worker(
            jobs=self.jobs,
            driver=driver,
            event_bus=event_bus,
            app=app,
            worker_id="harness",
            visibility_timeout_ms=visibility_timeout_ms,
            max_in_flight=max_in_flight,
            poll_interval_ms=poll_interval_ms,
            idle_poll_max_ms=max(poll_interval_ms, 2000),
            handle_signals=False,
            rng=random.Random(seed),
        )
        self.patience_s = patience_s

    @contextlib.contextmanager
    def bound(self) -> Iterator[JobHarness]:
        """Make the driver and the bus ambient; the clock stays the real one."""
        with swap_adapter(JOB_DRIVER, self.driver), swap_adapter(EVENT_BUS, self.bus):
            yield self

    async def drain(self, *, advance_retries: bool = True) -> JobTrace | None:
        """Run passes until nothing is due, waiting each retry backoff out for real unless
        ``advance_retries=False``; answers the trace of the job enqueued last (or ``None``)."""
        deadline = time.monotonic() + self.patience_s
        with self.bound():
            if not self._checked:
                self.worker.check()
                self._checked = True
            for _ in range(self.max_passes):
                found = await self.worker.run_pass()
                await self.worker.wait_idle()
                if found:
                    continue
                if not advance_retries:
                    break
                wait_ms = await self._backoff_left_ms()
                if wait_ms is None:
                    break
                if time.monotonic() + wait_ms / 1000 > deadline:
                    raise XError(
                        "X_INVARIANT",
                        f"drain would wait {wait_ms} ms more for a retry backoff, past its "
                        f"patience of {self.patience_s} s",
                        fix="declare a short Retry(delay='50ms') in a test on Postgres",
                    )
                await asyncio.sleep(wait_ms / 1000 + REAL_TIME_MARGIN_S)
            else:
                raise XError(
                    "X_INVARIANT",
                    f"drain ran {self.max_passes} passes and work was still due",
                    fix="a job that re-arms itself forever? raise max_passes= or fix the loop",
                )
        if not self.enqueued:
            return None
        return await self.trace(self.enqueued[-1])

    async def drain_until(
        self, *states: str, job_id: str | None = None, timeout_s: float = 5.0
    ) -> JobTrace:
        """Drain, again and again as real time passes (sleeps, event waits and polls come due),
        until the job (default: the one enqueued last) is in one of ``states``."""
        deadline = time.monotonic() + timeout_s
        while True:
            await self.drain()
            trace = await self.trace(job_id)
            if trace.state in states:
                return trace
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"job {trace.id} is {trace.state!r} after {timeout_s} s, not one of {states}"
                )
            await asyncio.sleep(0.02)

    async def _backoff_left_ms(self) -> int | None:
        """How long until the earliest ``ready`` row of a served queue is due (a retry backing
        off, a run handed back over a busy cap); ``None`` when there is none."""
        ready = [r for r in await self.rows(state="ready") if r.queue in self.worker.queues]
        if not ready:
            return None
        now = await self.driver.now_ms()
        return max(0, min(to_epoch_ms(r.run_at) for r in ready) - now)


@dataclass
class Engine:
    """One driver the engine runs over, with its bus and (on memory) its frozen clock."""

    kind: Literal["memory", "postgres"]
    driver: EngineDriver
    bus: EngineBus
    clock: FrozenClock | None
    """The ambient frozen clock on memory; ``None`` on Postgres (the database's clock)."""
    database_url: str | None = None
    schema: str | None = None

    @property
    def on_postgres(self) -> bool:
        return self.kind == "postgres"

    def harness(self, jobs: Sequence[Job[Any, Any]], **options: Any) -> JobHarness:
        """A harness on this driver and bus: the frozen one on memory, a ``RealTimeHarness`` on
        Postgres."""
        if isinstance(self.driver, MemoryJobDriver):
            assert self.clock is not None and isinstance(self.bus, MemoryEventBus)
            return JobHarness(
                jobs=jobs, driver=self.driver, clock=self.clock, event_bus=self.bus, **options
            )
        return self.real_time_harness(jobs, **options)

    def real_time_harness(self, jobs: Sequence[Job[Any, Any]], **options: Any) -> RealTimeHarness:
        """The harness on Postgres, typed as the ``RealTimeHarness`` it is (``drain_until``)."""
        assert isinstance(self.driver, PostgresJobDriver) and isinstance(self.bus, PostgresEventBus)
        return RealTimeHarness(jobs=jobs, driver=self.driver, event_bus=self.bus, **options)

    async def advance(self, duration: Duration) -> None:
        """Let ``duration`` pass: the frozen clock moves on memory; on Postgres it is waited out
        for real (plus a small margin)."""
        ms = parse_duration(duration, allow_zero=True)
        if self.clock is not None:
            self.clock.advance(ms)
        else:
            await asyncio.sleep(ms / 1000 + REAL_TIME_MARGIN_S)

    async def now_ms(self) -> int:
        """The driver's clock."""
        return await self.driver.now_ms()


@contextlib.asynccontextmanager
async def open_engine(kind: str, url: str) -> AsyncIterator[Engine]:
    """An ``Engine`` of ``kind``, its driver installed; closed (its schema dropped) after."""
    if kind == "memory":
        clock = FrozenClock()
        memory = memory_job_driver()
        with use_clock(clock), swap_adapter(JOB_DRIVER, memory):
            yield Engine("memory", memory, memory.event_bus(), clock)
        return
    assert kind == "postgres", kind
    schema = await make_schema(url)
    pg = postgres_job_driver(url, schema=schema)
    try:
        with swap_adapter(JOB_DRIVER, pg):
            yield Engine("postgres", pg, pg.event_bus(), None, url, schema)
    finally:
        await pg.close()
        await drop_schema(url, schema)


@pytest.fixture(params=ENGINE_DRIVERS)
async def engine(request: pytest.FixtureRequest, database_url: str) -> AsyncIterator[Engine]:
    """The engine's tests run once on each driver (see the module docstring)."""
    async with open_engine(request.param, database_url) as e:
        yield e


@pytest.fixture
async def pg_engine(database_url: str) -> AsyncIterator[Engine]:
    """The Postgres engine alone: the variants, in real time, of the memory-only tests."""
    async with open_engine("postgres", database_url) as e:
        yield e
