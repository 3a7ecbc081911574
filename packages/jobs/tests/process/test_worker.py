"""job_worker(): configuration refusals, the room split over queues, polling, wake, stop, and
the SIGTERM drain — on the memory driver and on Postgres (``engine``)."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import FrozenClock, Signal, XError, capture_log_events, swap_adapter, use_clock
from ultimat3.jobs import Concurrency, JobWorker, Retry, job, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER
from ultimat3.jobs.memory import MemoryJobDriver, memory_job_driver
from ultimat3_testkit.engine_drivers import Engine, EngineDriver


class N(BaseModel):
    n: int


gate = asyncio.Event()


def _job(queue: str, *, name: str | None = None, blocking: bool = False, **kw: Any) -> Any:
    async def body(input: N, step: Any, ctx: Any) -> int:
        if blocking:
            await gate.wait()
        return input.n

    return job(
        input=N,
        idempotency_key=lambda i: f"{queue}:{i.n}",
        queue=queue,
        name=name or f"job-{queue}",
        run=body,
        **kw,
    )


@pytest.fixture
def memory() -> Iterator[MemoryJobDriver]:
    with use_clock(FrozenClock()):
        d = memory_job_driver()
        with swap_adapter(JOB_DRIVER, d):
            yield d


@pytest.fixture
def driver(engine: Engine) -> EngineDriver:
    """The memory driver, then Postgres: installed as JOB_DRIVER."""
    return engine.driver


class ClaimSpy:
    def __init__(self, inner: EngineDriver) -> None:
        self.inner = inner
        self.claims: list[tuple[tuple[str, ...], int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def claim(self, *, queues: Sequence[str], limit: int, **kw: Any) -> Any:
        self.claims.append((tuple(queues), limit))
        return await self.inner.claim(queues=queues, limit=limit, **kw)


# --- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize("cap", [0, -1, 1.5, math.nan, math.inf, True])
def test_a_bad_max_in_flight_is_refused(cap: Any) -> None:
    with pytest.raises(XError) as exc:
        job_worker(jobs=[_job("a")], max_in_flight=cap)
    assert exc.value.code == "X_CONFIG_INVALID"
    assert "max_in_flight" in exc.value.message


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"jobs": []}, "jobs"),
        ({"jobs": ["not a job"]}, "not a job"),
        ({"queues": []}, "queues"),
        ({"poll_interval_ms": 0}, "poll_interval_ms"),
        ({"poll_interval_ms": 500, "idle_poll_max_ms": 100}, "idle_poll_max_ms"),
        ({"visibility_timeout_ms": 100, "heartbeat_interval_ms": 100}, "heartbeat_interval_ms"),
    ],
)
def test_a_bad_worker_configuration_is_refused(kwargs: dict[str, Any], needle: str) -> None:
    given: dict[str, Any] = {"jobs": [_job("a")]}
    given.update(kwargs)
    with pytest.raises(XError) as exc:
        job_worker(**given)
    assert exc.value.code == "X_CONFIG_INVALID"
    assert needle in exc.value.message
    assert exc.value.fix


def test_two_jobs_sharing_a_name_are_refused() -> None:
    with pytest.raises(XError) as exc:
        job_worker(jobs=[_job("a", name="same"), _job("b", name="same")])
    assert exc.value.code == "X_CONFIG_INVALID"
    assert "same" in exc.value.message


def test_the_queues_default_to_what_the_jobs_declare() -> None:
    w = job_worker(jobs=[_job("a"), _job("b"), _job("a", name="other")])
    assert w.queues == ("a", "b")


async def test_a_driver_without_a_lease_store_refuses_jobs_declaring_concurrency(
    driver: EngineDriver,
) -> None:
    class NoLeases(ClaimSpy):
        leases = None

    capped = _job("a", name="capped", concurrency=2)
    keyed = _job("a", name="keyed", concurrency=Concurrency(key=lambda i: str(i.n)))
    w = job_worker(jobs=[capped, keyed, _job("a")], driver=NoLeases(driver))
    with pytest.raises(XError) as exc:
        await w.start()
    assert exc.value.code == "X_JOB_CONCURRENCY_UNENFORCEABLE"
    assert "capped" in exc.value.message and "keyed" in exc.value.message
    assert exc.value.meta["jobs"] == ["capped", "keyed"]


async def test_a_driver_missing_members_is_refused_at_start() -> None:
    w = job_worker(jobs=[_job("a")], driver=object())  # type: ignore[arg-type]
    with pytest.raises(XError) as exc:
        await w.start()
    assert exc.value.code == "X_CONFIG_INVALID"
    assert "claim" in exc.value.message


# --- one pass ------------------------------------------------------------------------------------


async def _fill(counts: dict[str, int]) -> dict[str, Any]:
    jobs = {q: _job(q, blocking=True) for q in counts}
    for q, count in counts.items():
        await jobs[q].enqueue_many([{"n": i} for i in range(count)])
    return jobs


async def test_a_pass_is_one_claim_serving_the_queues_in_turn(driver: EngineDriver) -> None:
    gate.clear()
    jobs = await _fill({"a": 5, "b": 0, "c": 5})
    spy = ClaimSpy(driver)
    w = job_worker(jobs=list(jobs.values()), driver=spy, max_in_flight=4, handle_signals=False)
    assert await w.run_pass() == 4
    # ONE claim for the three queues: the first of a and of c, then the second of each (the
    # empty b's share goes to the others)
    assert spy.claims == [(("a", "b", "c"), 4)]
    assert sorted(c.queue for c in await _held(driver, w)) == ["a", "a", "c", "c"]
    assert w.stats().in_flight == 4
    assert await w.run_pass() == 0  # at the cap: claims nothing
    assert len(spy.claims) == 1
    gate.set()
    await w.wait_idle()
    spy.claims.clear()
    gate.clear()
    await w.run_pass()
    # starts after the last queue served (c), so a comes first again
    assert spy.claims == [(("a", "b", "c"), 4)]
    gate.set()
    await w.wait_idle()


async def _held(driver: EngineDriver, w: Any) -> list[Any]:
    return [await driver.introspect.show(job_id) for job_id in w.held()]


async def test_an_idle_pass_over_n_queues_is_one_claim(driver: EngineDriver) -> None:
    """Issue 16: an idle pass with max_in_flight set and N queues sends one claim, not N."""
    jobs = {q: _job(q) for q in ("q1", "q2", "q3", "q4", "q5")}
    spy = ClaimSpy(driver)
    w = job_worker(jobs=list(jobs.values()), driver=spy, max_in_flight=8, handle_signals=False)
    assert await w.run_pass() == 0
    assert spy.claims == [(("q1", "q2", "q3", "q4", "q5"), 8)]


async def test_no_queue_starves_the_next_pass_starts_after_the_last_served(
    driver: EngineDriver,
) -> None:
    gate.clear()
    jobs = await _fill({"a": 10, "b": 10, "c": 10})
    spy = ClaimSpy(driver)
    w = job_worker(jobs=list(jobs.values()), driver=spy, max_in_flight=1, handle_signals=False)
    served = []
    for _ in range(4):
        spy.claims.clear()
        await w.run_pass()
        served.append(spy.claims[0][0][0])
        gate.set()
        await w.wait_idle()
        gate.clear()
    assert served == ["a", "b", "c", "a"]
    gate.set()


async def test_an_idle_worker_woken_for_a_queue_claims_that_queue_first(
    driver: EngineDriver,
) -> None:
    """The pickup: the job the wake announced is claimed (and started) by the pass's first
    claim, not after a round trip to each empty queue ahead of it in the rotation. A worker
    holding runs keeps its rotation (no queue starves)."""
    held = asyncio.Event()  # this test's own: nothing else releases its runs

    def holding(queue: str) -> Any:
        async def body(input: N, step: Any, ctx: Any) -> int:
            await held.wait()
            return input.n

        return job(
            input=N, idempotency_key=lambda i: f"{queue}:{i.n}", queue=queue, name=queue, run=body
        )

    jobs = {q: holding(q) for q in ("wake-a", "wake-b", "wake-c")}
    await jobs["wake-c"].enqueue_many([{"n": i} for i in range(2)])
    spy = ClaimSpy(driver)
    w = job_worker(jobs=list(jobs.values()), driver=spy, max_in_flight=3, handle_signals=False)
    try:
        w.wake("wake-c")
        assert await w.run_pass() == 2
        assert spy.claims == [(("wake-c", "wake-a", "wake-b"), 3)]
        w.wake("wake-b")  # runs are held: the rotation goes on after wake-c
        spy.claims.clear()
        assert await w.run_pass() == 0
        assert spy.claims == [(("wake-a", "wake-b", "wake-c"), 1)]
    finally:
        held.set()
        await w.wait_idle()


class HeldAcks(ClaimSpy):
    """Acks that wait for ``release``: a run's body has ended, its settle is on its way."""

    def __init__(self, inner: EngineDriver) -> None:
        super().__init__(inner)
        self.release = asyncio.Event()

    async def ack(self, *args: Any, **kw: Any) -> Any:
        await self.release.wait()
        return await self.inner.ack(*args, **kw)

    async def ack_many(self, *args: Any, **kw: Any) -> Any:
        await self.release.wait()
        return await self.inner.ack_many(*args, **kw)


async def _settled_to(w: JobWorker, *, settling: int) -> None:
    for _ in range(500):
        stats = w.stats()
        if stats.in_flight == 0 and stats.settling == settling:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never {settling} settling with no body running: {w.stats()}")


async def test_the_cap_counts_bodies_so_the_next_claim_travels_while_the_settles_do(
    driver: EngineDriver,
) -> None:
    """max_in_flight caps bodies: a run whose body ended holds its lease until its ack lands,
    but frees its room at once; the runs still settling are bounded by another max_in_flight."""
    gate.set()
    jobs = await _fill({"s": 6})
    spy = HeldAcks(driver)
    w = job_worker(jobs=list(jobs.values()), driver=spy, max_in_flight=2, handle_signals=False)
    try:
        assert await w.run_pass() == 2
        await _settled_to(w, settling=2)
        assert len(w.held()) == 2
        assert await w.run_pass() == 2  # the acks are out: the room is the cap's again
        await _settled_to(w, settling=4)
        assert await w.run_pass() == 0  # 2 x max_in_flight settling: no claim at all
        assert [limit for _, limit in spy.claims] == [2, 2]
    finally:
        spy.release.set()
        await w.wait_idle()
    stats = w.stats()
    assert (stats.claimed, stats.completed, stats.in_flight, stats.settling) == (4, 4, 0, 0)


async def test_without_a_cap_one_claim_covers_every_queue(driver: EngineDriver) -> None:
    jobs = await _fill({"a": 2, "b": 2})
    spy = ClaimSpy(driver)
    gate.set()
    w = job_worker(jobs=list(jobs.values()), driver=spy, claim_batch=25, handle_signals=False)
    assert await w.run_pass() == 4
    assert spy.claims == [(("a", "b"), 25)]
    await w.wait_idle()
    stats = w.stats()
    assert (stats.claimed, stats.completed, stats.in_flight) == (4, 4, 0)


async def test_retry_dead_letter_false_jobs_are_named_to_the_claim(
    driver: EngineDriver,
) -> None:
    seen: list[Any] = []

    class Spy(ClaimSpy):
        async def claim(self, **kw: Any) -> Any:
            seen.append(tuple(kw["no_dead_letter"]))
            return await self.inner.claim(**kw)

    dropped = _job("a", name="droppable", retry=Retry(dead_letter=False))
    w = job_worker(jobs=[dropped, _job("a")], driver=Spy(driver), handle_signals=False)
    await w.run_pass()
    assert seen == [("droppable",)]


# --- the loop ------------------------------------------------------------------------------------


# memory only: on Postgres the worker starts the driver's LISTEN wake, and once it is proven the
# ceiling is 5 s (test_worker_wake.py proves that on Postgres)
async def test_idle_passes_wait_longer_doubling_to_the_ceiling(memory: MemoryJobDriver) -> None:
    w = job_worker(jobs=[_job("a")], poll_interval_ms=5, idle_poll_max_ms=40, handle_signals=False)
    waits: list[float] = []
    enough = asyncio.Event()
    original = w._sleep

    async def record(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) >= 6:
            enough.set()
        await original(seconds)

    w._sleep = record  # type: ignore[method-assign]
    await w.start()
    await asyncio.wait_for(enough.wait(), timeout=5)
    await w.stop()
    assert waits[:6] == [0.005, 0.01, 0.02, 0.04, 0.04, 0.04]


async def test_a_pass_that_finds_work_waits_only_the_poll_interval(
    driver: EngineDriver,
) -> None:
    gate.set()
    j = _job("a")
    await j.enqueue({"n": 1})
    w = job_worker(jobs=[j], poll_interval_ms=5, idle_poll_max_ms=40, handle_signals=False)
    waits: list[float] = []
    enough = asyncio.Event()
    original = w._sleep

    async def record(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) >= 3:
            enough.set()
        await original(seconds)

    w._sleep = record  # type: ignore[method-assign]
    await w.start()
    await asyncio.wait_for(enough.wait(), timeout=5)
    await w.stop()
    assert waits[:3] == [0.005, 0.005, 0.01]


async def test_wake_passes_at_once(driver: EngineDriver) -> None:
    gate.set()
    j = _job("a")
    w = job_worker(jobs=[j], poll_interval_ms=5000, idle_poll_max_ms=10_000, handle_signals=False)
    await w.start()
    await asyncio.sleep(0.02)  # the first (empty) pass ran; the loop now waits 5 s
    result = await j.enqueue({"n": 7})
    w.wake()
    for _ in range(100):
        if (await driver.introspect.show(result.id)).state == "done":
            break
        await asyncio.sleep(0.01)
    assert (await driver.introspect.show(result.id)).state == "done"
    await w.stop()


async def test_stop_aborts_nothing_and_waits_for_the_work(driver: EngineDriver) -> None:
    signals: list[Signal] = []
    started = asyncio.Event()

    async def slow(input: N, step: Any, ctx: Any) -> str:
        signals.append(ctx.signal)
        started.set()
        await asyncio.sleep(0.05)
        return "finished"

    j = job(input=N, idempotency_key=lambda i: str(i.n), name="slow", run=slow)
    result = await j.enqueue({"n": 1})
    w = job_worker(jobs=[j], poll_interval_ms=5, handle_signals=False)
    await w.start()
    await asyncio.wait_for(started.wait(), timeout=5)
    await w.stop()
    row = await driver.introspect.show(result.id)
    assert row.state == "done"
    assert row.result == "finished"
    assert signals[0].aborted is False
    assert w.stats().running is False


async def _held_worker(driver: EngineDriver) -> tuple[JobWorker, str, list[str]]:
    reasons: list[str] = []

    async def waits(input: N, step: Any, ctx: Any) -> None:
        reason = await ctx.signal.wait()
        reasons.append(reason.message)
        raise reason

    j = job(
        input=N,
        idempotency_key=lambda i: str(i.n),
        name="waits",
        run=waits,
        retry=Retry(attempts=1),
    )
    result = await j.enqueue({"n": 1})
    w = job_worker(jobs=[j], poll_interval_ms=5, handle_signals=True)
    await w.start()
    for _ in range(200):
        if w.held():
            break
        await asyncio.sleep(0.005)
    assert w.held() == [result.id]
    return w, result.id, reasons


async def test_drain_aborts_every_held_run_and_hands_it_back_uncounted(
    driver: EngineDriver,
) -> None:
    w, job_id, reasons = await _held_worker(driver)
    await w.drain()
    row = await driver.introspect.show(job_id)
    assert row.state == "ready"
    assert row.attempts == 0  # attempts: 1 survives a rollout
    assert reasons and w.id in reasons[0]
    assert w.stats().released == 1


def _sigterm(w: JobWorker) -> None:
    if threading.current_thread() is threading.main_thread() and w._signal_loop is not None:
        os.kill(os.getpid(), signal.SIGTERM)
    else:  # signals only reach the main thread's loop
        w._on_sigterm()


async def test_sigterm_drains_the_worker(driver: EngineDriver) -> None:
    w, job_id, reasons = await _held_worker(driver)
    _sigterm(w)
    for _ in range(200):
        if not w.stats().running and not w.held():
            break
        await asyncio.sleep(0.01)
    assert w._drain_task is not None
    await w._drain_task
    row = await driver.introspect.show(job_id)
    assert row.state == "ready"
    assert row.attempts == 0
    assert "SIGTERM" in reasons[0]


async def test_a_sigterm_during_stop_turns_the_wait_into_a_drain(driver: EngineDriver) -> None:
    w, job_id, reasons = await _held_worker(driver)
    stopping = asyncio.ensure_future(w.stop())
    await asyncio.sleep(0.02)
    assert not stopping.done()  # stop() waits for the held run and aborts nothing
    assert reasons == []
    _sigterm(w)
    await asyncio.wait_for(stopping, timeout=5)
    assert "SIGTERM" in reasons[0]
    assert (await driver.introspect.show(job_id)).state == "ready"


async def test_a_started_worker_registers_and_a_stopped_one_leaves(
    driver: EngineDriver,
) -> None:
    w = job_worker(jobs=[_job("a")], max_in_flight=3, poll_interval_ms=5, handle_signals=False)
    await w.start()
    [row] = await driver.introspect.workers()
    assert row.id == w.id
    assert row.queues == ("a",)
    assert row.slots == 3
    await w.stop()
    assert await driver.introspect.workers() == []


async def test_a_worker_at_its_cap_keeps_its_registry_entry_alive() -> None:
    """The registry heartbeat runs on its own timer: a worker whose every slot is held by a
    long run (its claim loop asleep at the cap) still renews its entry, so the entry never
    expires under a live worker (and a lapse of one of its runs never reads as a crash)."""
    driver = memory_job_driver()  # the real clock: the entry expires one visibility timeout on
    release = asyncio.Event()

    async def holds(input: N, step: Any, ctx: Any) -> None:
        await release.wait()

    j = job(input=N, idempotency_key=lambda i: str(i.n), name="holds", run=holds)
    with swap_adapter(JOB_DRIVER, driver):
        await j.enqueue({"n": 1})
        w = job_worker(
            jobs=[j],
            max_in_flight=1,
            visibility_timeout_ms=600,
            heartbeat_interval_ms=200,
            poll_interval_ms=5,
            handle_signals=False,
        )
        await w.start()
        try:
            for _ in range(200):
                if w.held():
                    break
                await asyncio.sleep(0.005)
            assert w.room() == 0  # at the cap: the claim loop only sleeps
            await asyncio.sleep(1.5)  # two and a half visibility timeouts
            assert [row.id for row in await driver.introspect.workers()] == [w.id]
        finally:
            release.set()
            await w.stop()
        assert await driver.introspect.workers() == []


async def test_a_failing_claim_is_logged_and_the_loop_goes_on(driver: EngineDriver) -> None:
    class Down(ClaimSpy):
        async def claim(self, **kw: Any) -> Any:
            self.claims.append(((), 0))
            raise ConnectionError("database is down")

    down = Down(driver)
    w = job_worker(
        jobs=[_job("a")],
        driver=down,
        poll_interval_ms=2,
        idle_poll_max_ms=4,
        handle_signals=False,
    )
    with capture_log_events() as events:
        await w.start()
        for _ in range(200):
            if len(down.claims) >= 3:
                break
            await asyncio.sleep(0.005)
        await w.stop()
    assert len(down.claims) >= 3
    assert any(e["event"] == "jobs.driver.unavailable" for e in events)


async def test_a_drained_worker_can_start_again(driver: EngineDriver) -> None:
    gate.set()
    j = _job("a")
    w = job_worker(jobs=[j], poll_interval_ms=5, handle_signals=False)
    await w.start()
    await w.drain()
    assert w.stats().draining is True
    await w.start()
    assert w.stats().draining is False
    result = await j.enqueue({"n": 1})
    w.wake()
    for _ in range(200):
        if (await driver.introspect.show(result.id)).state == "done":
            break
        await asyncio.sleep(0.005)
    await w.stop()
    assert (await driver.introspect.show(result.id)).state == "done"
