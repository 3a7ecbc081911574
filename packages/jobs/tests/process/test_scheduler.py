"""The scheduler on the memory driver under a FrozenClock (time is driven by the test, one tick a
simulated second): one leader, the one-operation fire, pause and catch-up, idle cost. The same
guarantees over real Postgres and a killed process are in test_scheduler_postgres.py."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import FrozenClock, XError, capture_log_events, swap_adapter
from ultimat3.jobs import CatchUp, Task, TaskScheduler, job, task, task_scheduler
from ultimat3.jobs._declare.task import MAX_CATCH_UP
from ultimat3.jobs._process.scheduler import LATE_MS, LEASE_KEY, LEASE_MS, RENEW_MS
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.memory import MemoryJobDriver, memory_job_driver


class Tick(BaseModel):
    at: str


@job(input=Tick, idempotency_key=lambda i: f"tick:{i.at}")
async def on_tick(input: Tick, step: Any, ctx: Any) -> None:
    return None


START = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)


def _every_minute(name: str = "minutely", catch_up: CatchUp = "latest") -> Task:
    return task(
        name=name,
        cron="* * * * *",
        catch_up=catch_up,
        enqueue=lambda at: (on_tick, {"at": f"{name}@{at.at.isoformat()}"}),
    )


def _minute(n: int) -> int:
    """Epoch ms of 12:00 + n minutes on START's day."""
    return int(START.replace(second=0).timestamp() * 1000) + n * 60_000


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


class Spy:
    """A driver whose every store call is counted (the idle-cost test reads the tally)."""

    def __init__(self, inner: MemoryJobDriver) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.name = inner.name
        self.leases = _Counting(inner.leases, self.calls, "leases")
        self.introspect = _Counting(inner.introspect, self.calls, "introspect")

    async def fire_task(self, task: str, occurrence_ms: int, requests: Any) -> bool:
        self.calls["fire_task"] += 1
        return await self.inner.fire_task(task, occurrence_ms, requests)


class _Counting:
    def __init__(self, inner: Any, calls: Counter[str], prefix: str) -> None:
        self._inner, self._calls, self._prefix = inner, calls, prefix

    def __setattr__(self, name: str, value: Any) -> None:
        """A test may set a member of its own, which then shadows the wrapped one's."""
        super().__setattr__(name, value)

    def __getattr__(self, name: str) -> Any:
        member = getattr(self._inner, name)
        if not callable(member):
            return member

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._calls[f"{self._prefix}.{name}"] += 1
            return member(*args, **kwargs)

        return counted


def _leading(s: TaskScheduler) -> bool:
    """``s.leading`` read through a call, so mypy does not keep the property narrowed by an
    assert across the ticks that change it."""
    return s.leading


async def _run(s: TaskScheduler, clock: FrozenClock, seconds: int) -> None:
    """Tick once a simulated second for ``seconds`` seconds."""
    for _ in range(seconds):
        clock.advance("1s")
        await s.tick()


async def _ticks(driver: MemoryJobDriver) -> list[str]:
    rows = await driver.introspect.list(limit=200)
    return sorted(r.idempotency_key for r in rows)


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(START)


@pytest.fixture
def driver(clock: FrozenClock) -> MemoryJobDriver:
    return memory_job_driver(clock=clock)


async def test_each_occurrence_fires_once_with_its_jobs_and_watermark(
    clock: FrozenClock, driver: MemoryJobDriver
) -> None:
    s = task_scheduler(purge=False, tasks=[_every_minute()], driver=driver, clock=clock)
    with capture_log_events() as events:
        await _run(s, clock, 150)  # 12:00:30 -> 12:03:00
    # 12:00 is 30 s late at the first tick (within LATE_MS): it fires too
    minutes = (0, 1, 2, 3)
    assert await _ticks(driver) == [f"tick:minutely@{_iso(_minute(n))}" for n in minutes]
    (fire,) = await driver.introspect.task_fires()
    assert (fire.task, fire.occurrence_ms) == ("minutely", _minute(3))
    fired = [e for e in events if e["event"] == "jobs.task.fired"]
    assert [e["occurrence_ms"] for e in fired] == [_minute(n) for n in minutes]
    assert events[0]["event"] == "jobs.scheduler.lead"
    assert s.stats().fired == 4


async def test_the_task_that_never_fired_starts_one_minute_before_the_lead(
    clock: FrozenClock, driver: MemoryJobDriver
) -> None:
    # 12:00:30: the 12:00 occurrence is 30 s late, within LATE_MS — a failover never loses it
    s = task_scheduler(
        purge=False, tasks=[_every_minute(catch_up="none")], driver=driver, clock=clock
    )
    await s.tick()
    assert [f.occurrence_ms for f in await driver.introspect.task_fires()] == [_minute(0)]
    assert LATE_MS == 60_000


async def test_with_nothing_due_a_tick_reads_no_store_and_an_idle_minute_is_six_renewals(
    clock: FrozenClock, driver: MemoryJobDriver
) -> None:
    spy = Spy(driver)
    tasks = [
        task(name=f"daily-{i}", cron=f"{i} 3 * * *", enqueue=lambda at: (on_tick, {"at": "x"}))
        for i in range(50)
    ]
    s = task_scheduler(purge=False, tasks=tasks, driver=spy, clock=clock)  # type: ignore[arg-type]
    await s.tick()
    assert s.leading
    spy.calls.clear()
    await _run(s, clock, 60)
    assert dict(spy.calls) == {"leases.renew": 60_000 // RENEW_MS}


async def test_one_scheduler_leads_and_a_dead_leader_is_replaced_within_one_lease(
    clock: FrozenClock, driver: MemoryJobDriver
) -> None:
    t = _every_minute()
    a = task_scheduler(purge=False, tasks=[t], driver=driver, clock=clock)
    b = task_scheduler(purge=False, tasks=[t], driver=driver, clock=clock)
    for _ in range(40):
        clock.advance("1s")
        await a.tick()
        await b.tick()
        assert [a.leading, b.leading].count(True) == 1
    assert a.leading  # the first to ask
    holders = await driver.leases.holders(LEASE_KEY)
    assert [h.holder for h in holders] == [a.id]
    # a dies: it stops ticking and never hands the lease back
    last_renewal = holders[0].expires_at_ms - LEASE_MS
    while not b.leading:
        clock.advance("1s")
        await b.tick()
        assert clock.now_ms() <= last_renewal + LEASE_MS + 1000  # within one lease (and a tick)
    # b carries on from a's watermark: every minute fired exactly once across both
    await _run(b, clock, 120)
    keys = await _ticks(driver)
    assert len(keys) == len(set(keys))
    fires = await driver.introspect.task_fires()
    minutes = (fires[0].occurrence_ms - _minute(0)) // 60_000
    assert len(keys) == minutes + 1  # 12:00 .. the last minute, each once


async def test_a_stale_leader_cannot_fire_an_occurrence_again(
    clock: FrozenClock, driver: MemoryJobDriver
) -> None:
    t = _every_minute()
    occurrence = _minute(1)
    assert await driver.fire_task(t.name, occurrence, t.requests(occurrence))
    again = t.requests(occurrence)
    assert not await driver.fire_task(t.name, occurrence, again)
    assert not await driver.fire_task(t.name, occurrence - 60_000, t.requests(occurrence - 60_000))
    assert len(await _ticks(driver)) == 1


async def test_fire_task_checks_every_request_before_anything_moves(
    driver: MemoryJobDriver,
) -> None:
    t = _every_minute()
    good = t.requests(_minute(1))
    from dataclasses import replace

    bad = replace(good[0], id="", idempotency_key="other")
    with pytest.raises(XError):
        await driver.fire_task(t.name, _minute(1), [*good, bad])
    assert await driver.introspect.task_fires() == []
    assert await _ticks(driver) == []


@pytest.mark.parametrize(
    ("catch_up", "fired_after_resume"),
    [("latest", [7]), ("all", [3, 4, 5, 6, 7]), ("none", [])],
)
async def test_a_paused_task_does_not_fire_and_on_resume_its_catch_up_decides(
    clock: FrozenClock,
    driver: MemoryJobDriver,
    catch_up: CatchUp,
    fired_after_resume: list[int],
) -> None:
    t = _every_minute(catch_up=catch_up)
    s = task_scheduler(purge=False, tasks=[t], driver=driver, clock=clock)
    await _run(s, clock, 150)  # fires 12:01, 12:02; now 12:03:00 (12:03 fires on this tick)
    await driver.introspect.pause_task(t.name)
    with capture_log_events() as events:
        await _run(s, clock, 270)  # 12:03:00 -> 12:07:30: 12:03..12:07 are due while paused
    skipped = [e for e in events if e["event"] == "jobs.task.skipped"]
    assert skipped and all(e["reason"] == "paused" for e in skipped)
    before = await driver.introspect.task_fires()
    assert before[0].occurrence_ms <= _minute(3)
    fired_before = {f.occurrence_ms for f in before}
    await driver.introspect.resume_task(t.name)
    with capture_log_events() as events:
        await _run(s, clock, RENEW_MS // 1000)  # noticed at the next renewal, before 12:08
    fired = [e["occurrence_ms"] for e in events if e["event"] == "jobs.task.fired"]
    expected = [_minute(n) for n in fired_after_resume if _minute(n) not in fired_before]
    assert fired == expected
    assert clock.now_ms() < _minute(8)
    # and then on schedule again, whatever catch_up says
    with capture_log_events() as events:
        await _run(s, clock, 60)
    assert [e["occurrence_ms"] for e in events if e["event"] == "jobs.task.fired"] == [_minute(8)]


@pytest.mark.parametrize(
    ("catch_up", "fired_minutes", "missed"),
    [("latest", [31], 29), ("all", list(range(2, 32)), 0), ("none", [31], 29)],
)
async def test_a_scheduler_that_was_down_catches_up_as_the_task_says(
    clock: FrozenClock,
    driver: MemoryJobDriver,
    catch_up: CatchUp,
    fired_minutes: list[int],
    missed: int,
) -> None:
    t = _every_minute(catch_up=catch_up)
    first = task_scheduler(purge=False, tasks=[t], driver=driver, clock=clock)
    await _run(first, clock, 40)  # fires 12:00 and 12:01; now 12:01:10
    await first.stop()  # hands the lease back
    clock.advance("30m")  # nobody ran: 12:02 .. 12:30 were missed; 12:31 is 10 s late, on time
    second = task_scheduler(purge=False, tasks=[t], driver=driver, clock=clock)
    with capture_log_events() as events:
        await second.tick()
    fired = [e["occurrence_ms"] for e in events if e["event"] == "jobs.task.fired"]
    assert fired == [_minute(n) for n in fired_minutes]
    skipped = [e for e in events if e["event"] == "jobs.task.skipped"]
    assert sum(e["count"] for e in skipped) == missed
    assert all(e["reason"] == "missed" for e in skipped)


async def test_catch_up_all_is_bounded(clock: FrozenClock, driver: MemoryJobDriver) -> None:
    t = _every_minute(catch_up="all")
    await driver.fire_task(t.name, _minute(0), t.requests(_minute(0)))
    clock.advance("1d")
    s = task_scheduler(purge=False, tasks=[t], driver=driver, clock=clock)
    with capture_log_events() as events:
        await s.tick()
    fired = [e["occurrence_ms"] for e in events if e["event"] == "jobs.task.fired"]
    assert len(fired) == MAX_CATCH_UP
    assert fired[-1] == _minute(24 * 60)  # the latest ones, oldest first
    assert fired == sorted(fired)


async def test_a_job_the_task_builds_wrongly_is_logged_and_skipped_not_retried(
    clock: FrozenClock, driver: MemoryJobDriver
) -> None:
    t = task(name="broken", cron="* * * * *", enqueue=lambda at: (on_tick, {"at": 5}))
    s = task_scheduler(purge=False, tasks=[t], driver=driver, clock=clock)
    with capture_log_events() as events:
        await _run(s, clock, 100)  # 12:00:30 -> 12:02:10
    failed = [e for e in events if e["event"] == "jobs.task.fire-failed"]
    assert [e["occurrence_ms"] for e in failed] == [_minute(0), _minute(1), _minute(2)]
    assert {e["code"] for e in failed} == {"X_BODY_INVALID"}
    assert failed[0]["task"] == "broken"
    assert await driver.introspect.task_fires() == []


async def test_the_installed_driver_is_the_default(
    clock: FrozenClock, driver: MemoryJobDriver
) -> None:
    s = task_scheduler(purge=False, tasks=[_every_minute()], clock=clock)
    with swap_adapter(JOB_DRIVER, driver):
        await _run(s, clock, 31)
    assert len(await _ticks(driver)) == 2  # 12:00 (30 s late) and 12:01


def test_a_bad_scheduler_is_refused() -> None:
    t = _every_minute()
    with pytest.raises(XError) as exc:
        task_scheduler(purge=False, tasks=[t, t])
    assert exc.value.code == "X_CONFIG_INVALID" and "'minutely' twice" in exc.value.message
    with pytest.raises(XError) as exc:
        task_scheduler(purge=False, tasks=[on_tick])  # type: ignore[list-item]
    assert "not a task" in exc.value.message
    with pytest.raises(XError) as exc:
        task_scheduler(purge=False, tasks=[t], renew_ms=30_000, lease_ms=30_000)
    assert "renew_ms" in exc.value.message


async def test_a_driver_without_fire_task_is_refused_at_start() -> None:
    class Bare:
        name = "bare"

    s = task_scheduler(purge=False, tasks=[_every_minute()], driver=Bare())  # type: ignore[arg-type]
    with pytest.raises(XError) as exc:
        await s.start()
    assert exc.value.code == "X_CONFIG_INVALID"
    assert "'bare'" in exc.value.message and "fire_task" in exc.value.message


async def test_each_fire_is_a_span_and_its_jobs_carry_the_fires_trace(
    clock: FrozenClock, driver: MemoryJobDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ultimat3.jobs._process import scheduler as _scheduler

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("ultimat3")
    monkeypatch.setattr(_scheduler, "tracer", lambda: tracer)
    s = task_scheduler(purge=False, tasks=[_every_minute()], driver=driver, clock=clock)
    try:
        await _run(s, clock, 31)  # fires 12:00 (late) and 12:01
    finally:
        provider.shutdown()
    spans = [sp for sp in exporter.get_finished_spans() if sp.name == "x.task.fire"]
    assert [dict(sp.attributes or {}) for sp in spans] == [
        {
            "x.task": "minutely",
            "x.task.occurrence_ms": _minute(n),
            "x.task.catch_up": False,
            "x.task.outcome": "fired",
            "x.task.jobs": 1,
        }
        for n in (0, 1)
    ]
    claimed = await driver.claim(
        queues=["default"], limit=10, worker_id="w", visibility_timeout_ms=30_000
    )
    traces = {c.payload["at"]: c.trace_context for c in claimed}
    for sp, n in zip(spans, (0, 1), strict=True):
        assert sp.context is not None
        stored = traces[f"minutely@{_iso(_minute(n))}"]
        assert stored is not None
        assert f"{sp.context.trace_id:032x}" in stored["traceparent"]


async def test_a_pause_landing_between_the_read_and_the_fire_is_honoured(
    clock: FrozenClock, driver: MemoryJobDriver
) -> None:
    spy = Spy(driver)
    stale = [True]
    real = driver.introspect.paused_tasks

    async def paused_tasks() -> list[str]:
        if stale and stale.pop():
            return []  # the scheduler's read, just before someone paused the task
        return await real()

    s = task_scheduler(purge=False, tasks=[_every_minute()], driver=spy, clock=clock)  # type: ignore[arg-type]
    await s.tick()  # leads; 12:00 fires
    await driver.introspect.pause_task("minutely")
    spy.introspect.paused_tasks = paused_tasks
    with capture_log_events() as events:
        await _run(s, clock, 60)  # 12:01 is due: the read says unpaused, the driver refuses
    assert [e["reason"] for e in events if e["event"] == "jobs.task.skipped"] == ["paused"]
    assert [f.occurrence_ms for f in await driver.introspect.task_fires()] == [_minute(0)]
    assert len(await _ticks(driver)) == 1
    await driver.introspect.resume_task("minutely")
    with capture_log_events() as events:
        await _run(s, clock, 10)  # noticed at the next renewal: catch_up='latest' fires 12:01
    fired = [e["occurrence_ms"] for e in events if e["event"] == "jobs.task.fired"]
    assert fired == [_minute(1)]


async def test_a_failed_read_at_the_lead_leaves_a_standby_that_asks_again(
    clock: FrozenClock, driver: MemoryJobDriver
) -> None:
    spy = Spy(driver)
    real = driver.introspect.task_fires
    failures = [XError("X_DRIVER_UNAVAILABLE", "the store blinked")]

    async def task_fires() -> Any:
        if failures:
            raise failures.pop()
        return await real()

    spy.introspect.task_fires = task_fires
    s = task_scheduler(purge=False, tasks=[_every_minute()], driver=spy, clock=clock)  # type: ignore[arg-type]
    with pytest.raises(XError):
        await s.tick()
    assert not _leading(s)
    clock.advance("1s")
    await s.tick()  # the same holder gets its slot back and leads
    assert s.leading
    assert [f.occurrence_ms for f in await driver.introspect.task_fires()] == [_minute(0)]


@pytest.mark.parametrize(
    ("cron", "tz", "start", "fires_utc"),
    [
        # spring forward in Berlin: 02:30 does not exist; it fires once, at 03:30 CEST
        ("30 2 * * *", "Europe/Berlin", "2026-03-29T00:00:00Z", ["2026-03-29T01:30:00+00:00"]),
        # fall back in New York: 01:30 happens twice; it fires once, at the first (EDT)
        ("30 1 * * *", "America/New_York", "2026-11-01T04:00:00Z", ["2026-11-01T05:30:00+00:00"]),
        # an hourly schedule fires in both repeated hours
        (
            "30 * * * *",
            "America/New_York",
            "2026-11-01T04:00:00Z",
            [f"2026-11-01T0{h}:30:00+00:00" for h in (4, 5, 6, 7)],
        ),
    ],
)
async def test_the_scheduler_fires_once_through_a_dst_change(
    cron: str, tz: str, start: str, fires_utc: list[str]
) -> None:
    clock = FrozenClock(start)
    driver = memory_job_driver(clock=clock)
    t = task(name="dst", cron=cron, tz=tz, enqueue=lambda at: (on_tick, {"at": at.at.isoformat()}))
    s = task_scheduler(purge=False, tasks=[t], driver=driver, clock=clock)
    with capture_log_events() as events:
        await _run(s, clock, 4 * 3600)
    fired = [e["occurrence_ms"] for e in events if e["event"] == "jobs.task.fired"]
    assert [_iso(ms) for ms in fired] == fires_utc
