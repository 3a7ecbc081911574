"""Compensation: only once the run failed for good, last-in first-out as compensate:<name>, the
durable unwind (unwinding, the replay that only re-registers), UNWIND_MARGIN, a throwing
compensator, once + compensate, the row's error, and x jobs retry continuing the unwind — on the
memory driver and on Postgres (``harness``); what drives the frozen clock is memory-only, with a
real-time variant on Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import Signal, XError, register_error_retry
from ultimat3.jobs import Job, Retry, job
from ultimat3.jobs._declare.policy import UNWIND_MARGIN
from ultimat3.jobs.testing import JobHarness
from ultimat3_testkit.engine_drivers import Engine

Harness = Callable[[Sequence[Job[Any, Any]]], JobHarness]


@pytest.fixture(autouse=True)
def _classified() -> None:
    register_error_retry({"X_TEST_COMP_TERMINAL": "terminal"})


@pytest.fixture
def harness(engine: Engine) -> Harness:
    """A harness on the memory driver, then on Postgres (real time)."""
    return lambda jobs: engine.harness(jobs)


class Order(BaseModel):
    order_id: str = "o1"


def _key(o: Order) -> str:
    return f"checkout:{o.order_id}"


class Shop:
    """The world a checkout touches: effects and their undos, in order, plus failure switches."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.ship_fails = 99
        self.release_fails = 0
        self.ship_error: Exception = ConnectionError("carrier down")

    def charge(self, signal: Signal) -> dict[str, str]:
        self.log.append("charge")
        return {"id": "ch_1"}

    def reserve(self, signal: Signal) -> dict[str, str]:
        self.log.append("reserve")
        return {"id": "rs_1"}

    def ship(self, signal: Signal) -> None:
        self.log.append("ship")
        if self.ship_fails > 0:
            self.ship_fails -= 1
            raise self.ship_error

    def refund(self, charge: dict[str, str], signal: Signal) -> str:
        assert isinstance(signal, Signal)
        self.log.append(f"refund {charge['id']}")
        return "refunded"

    def release(self, reservation: dict[str, str]) -> None:  # the one-argument form
        self.log.append(f"release {reservation['id']}")
        if self.release_fails > 0:
            self.release_fails -= 1
            raise RuntimeError("warehouse api down")


def checkout(
    shop: Shop, *, attempts: int = 3, dead_letter: bool = True, delay: str | int = 0
) -> Job[Any, Any]:
    async def body(input: Order, step: Any, ctx: Any) -> None:
        shop.log.append(f"attempt {ctx.attempt} final={ctx.final_attempt}")
        await step.run("charge", shop.charge, compensate=shop.refund)
        await step.run("reserve", shop.reserve, compensate=shop.release)
        await step.run("ship", shop.ship)

    return job(
        input=Order,
        idempotency_key=_key,
        name="checkout",
        compensates=True,
        retry=Retry(attempts=attempts, delay=delay, jitter="none", dead_letter=dead_letter),
        run=body,
    )


def effects(shop: Shop) -> list[str]:
    return [e for e in shop.log if not e.startswith("attempt")]


async def test_a_run_failed_for_good_is_unwound_last_in_first_out_and_keeps_its_error(
    harness: Harness,
) -> None:
    shop = Shop()
    checkout_job = checkout(shop)
    h = harness([checkout_job])
    trace = await h(checkout_job, {})
    # three forward attempts, ship retried; never compensated on a retry
    assert effects(shop) == [
        "charge",
        "reserve",
        "ship",
        "ship",
        "ship",
        "release rs_1",
        "refund ch_1",
    ]
    assert trace.state == "dead"
    assert trace.max_attempts == 3 + UNWIND_MARGIN
    assert trace.attempts == 4  # the unwind ran on the attempt after the final one
    assert trace.last_error is not None
    assert trace.last_error["code"] is None  # the ORIGINAL failure, not the unwind's
    assert "carrier down" in trace.last_error["message"]
    assert trace.last_error["meta"]["step"] == "ship"
    assert trace.steps["unwinding"].output["error"]["message"] == trace.last_error["message"]
    assert trace.steps["compensate:reserve"].state == "completed"
    assert trace.steps["compensate:charge"].output == "refunded"
    assert "compensate:ship" not in trace.steps  # no compensator declared
    assert trace.steps["charge"].executions == 1  # the replay never called fn


async def test_final_attempt_reports_on_retry_attempts_not_the_rows_max_attempts(
    harness: Harness,
) -> None:
    shop = Shop()
    checkout_job = checkout(shop)
    await harness([checkout_job])(checkout_job, {})
    assert [e for e in shop.log if e.startswith("attempt")] == [
        "attempt 1 final=False",
        "attempt 2 final=False",
        "attempt 3 final=True",
        "attempt 4 final=True",  # the unwind's replay: the forward attempts are spent
    ]


async def test_a_terminal_code_unwinds_without_spending_the_attempts(harness: Harness) -> None:
    shop = Shop()
    shop.ship_error = XError("X_TEST_COMP_TERMINAL", "address refused")
    checkout_job = checkout(shop, attempts=5)
    trace = await harness([checkout_job])(checkout_job, {})
    assert effects(shop) == ["charge", "reserve", "ship", "release rs_1", "refund ch_1"]
    assert trace.state == "dead" and trace.attempts == 2
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_TEST_COMP_TERMINAL"
    assert "not retried" in trace.last_error["message"]


async def test_a_run_that_succeeds_on_a_retry_is_never_compensated(harness: Harness) -> None:
    shop = Shop()
    shop.ship_fails = 2
    checkout_job = checkout(shop)
    trace = await harness([checkout_job])(checkout_job, {})
    assert trace.state == "done"
    assert not [e for e in effects(shop) if e.startswith(("refund", "release"))]
    assert "unwinding" not in trace.steps


# memory only: the frozen clock moves past the sleep (variant on Postgres below)
async def test_a_suspension_and_a_cancel_are_never_compensated() -> None:
    shop = Shop()

    @job(input=Order, idempotency_key=_key, compensates=True, name="sleepy")
    async def sleepy(input: Order, step: Any, ctx: Any) -> None:
        await step.run("charge", shop.charge, compensate=shop.refund)
        await step.sleep("1d")

    h = JobHarness(jobs=[sleepy])
    trace = await h(sleepy, {})
    assert trace.state == "suspended"
    with h.bound():
        await h.driver.introspect.cancel(trace.id, reason="customer changed their mind")  # type: ignore[attr-defined]
    h.clock.advance("2d")
    await h.drain()
    assert effects(shop) == ["charge"]
    assert (await h.trace(trace.id)).state == "cancelled"


async def test_on_postgres_a_suspension_and_a_cancel_are_never_compensated(
    pg_engine: Engine,
) -> None:
    shop = Shop()

    @job(input=Order, idempotency_key=_key, compensates=True, name="sleepy")
    async def sleepy(input: Order, step: Any, ctx: Any) -> None:
        await step.run("charge", shop.charge, compensate=shop.refund)
        await step.sleep("200ms")

    h = pg_engine.harness([sleepy])
    trace = await h(sleepy, {})
    assert trace.state == "suspended"
    await pg_engine.driver.introspect.cancel(trace.id, reason="customer changed their mind")
    await asyncio.sleep(0.25)  # past the wake time
    await h.drain()
    assert effects(shop) == ["charge"]
    trace = await h.trace(trace.id)
    assert trace.state == "cancelled" and "unwinding" not in trace.steps


async def test_a_drain_is_never_compensated(harness: Harness) -> None:
    shop = Shop()
    started = asyncio.Event()

    @job(input=Order, idempotency_key=_key, compensates=True, name="drained")
    async def drained(input: Order, step: Any, ctx: Any) -> None:
        await step.run("charge", shop.charge, compensate=shop.refund)
        started.set()
        await ctx.signal.wait()
        ctx.signal.throw_if_aborted()

    h = harness([drained])
    await h.enqueue(drained, {})
    with h.bound():
        await h.worker.run_pass()
        await started.wait()
        await h.worker.drain()
    trace = await h.trace()
    assert trace.state == "ready" and trace.attempts == 0
    assert effects(shop) == ["charge"]
    assert "unwinding" not in trace.steps


async def test_a_throwing_compensator_goes_back_while_the_unwind_has_attempts_then_is_dead(
    harness: Harness,
) -> None:
    shop = Shop()
    shop.release_fails = 99
    checkout_job = checkout(shop)
    h = harness([checkout_job])
    trace = await h(checkout_job, {})
    # attempts 4 and 5 (the margin) each tried the compensator; charge was never refunded
    assert [e for e in effects(shop) if e.startswith(("release", "refund"))] == [
        "release rs_1",
        "release rs_1",
    ]
    assert trace.state == "dead" and trace.attempts == 5
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_COMPENSATION_FAILED"
    assert "reserve" in trace.last_error["message"]
    assert trace.last_error["meta"]["step"] == "reserve"
    assert "carrier down" in trace.last_error["meta"]["original"]["message"]
    assert f"x jobs retry {trace.id}" in trace.last_error["fix"]
    assert trace.steps["compensate:reserve"].state == "failed"
    assert trace.steps["compensate:reserve"].executions == 2

    # fix it and retry: the unwind continues, never the forward path
    shop.release_fails = 0
    await h.requeue(trace.id)
    again = await h.drain()
    assert again is not None
    trace = again
    assert trace.state == "dead"
    assert effects(shop)[-2:] == ["release rs_1", "refund ch_1"]
    assert effects(shop).count("ship") == 3 and effects(shop).count("charge") == 1
    assert trace.last_error is not None
    assert "carrier down" in trace.last_error["message"]  # back to the original failure


async def test_while_a_compensator_retries_the_rows_error_stays_the_original(
    harness: Harness,
) -> None:
    shop = Shop()
    shop.ship_fails = 1
    shop.release_fails = 1
    shop.ship_error = XError("X_TEST_COMP_TERMINAL", "refused")
    checkout_job = checkout(shop, delay="300ms")
    h = harness([checkout_job])
    await h.enqueue(checkout_job, {})
    await h.drain(advance_retries=False)  # ship refused, handed to the unwind, release threw
    trace = await h.trace()
    assert trace.state == "ready" and trace.attempts == 2  # backing off before the next try
    assert trace.last_error is not None and trace.last_error["code"] == "X_TEST_COMP_TERMINAL"
    assert trace.steps["compensate:reserve"].state == "failed"
    trace_done = await h.drain()
    assert trace_done is not None and trace_done.state == "dead" and trace_done.attempts == 3
    assert trace_done.steps["compensate:reserve"].executions == 2
    assert trace_done.steps["compensate:charge"].executions == 1
    assert trace_done.last_error is not None
    assert trace_done.last_error["code"] == "X_TEST_COMP_TERMINAL"


async def test_a_replay_skips_the_compensators_already_recorded(harness: Harness) -> None:
    shop = Shop()
    refunds = {"n": 0}

    def flaky_refund(charge: dict[str, str], signal: Signal) -> None:
        refunds["n"] += 1
        if refunds["n"] == 1:
            raise RuntimeError("psp timeout")

    @job(input=Order, idempotency_key=_key, compensates=True, retry=Retry(attempts=1, delay=0))
    async def two(input: Order, step: Any, ctx: Any) -> None:
        await step.run("charge", shop.charge, compensate=flaky_refund)
        await step.run("reserve", shop.reserve, compensate=shop.release)
        raise RuntimeError("nope")

    trace = await harness([two])(two, {})
    assert trace.state == "dead"
    assert effects(shop).count("release rs_1") == 1  # not undone twice by the second unwind
    assert refunds["n"] == 2
    assert trace.steps["compensate:charge"].executions == 2


# memory only: the frozen clock moves past the lease (variant on Postgres below)
async def test_a_crash_on_the_final_attempt_is_reoffered_and_unwinds() -> None:
    shop = Shop()
    checkout_job = checkout(shop, attempts=1)
    h = JobHarness(jobs=[checkout_job], visibility_timeout_ms=30_000)
    r = await h.enqueue(checkout_job, {})
    with h.bound():
        # the only forward attempt is claimed and its worker dies before it settles
        [claimed] = await h.driver.claim(
            queues=["default"], limit=1, worker_id="dead", visibility_timeout_ms=30_000
        )
        assert claimed.max_attempts == 1 + UNWIND_MARGIN
        await h.driver.steps.record(
            r.id,
            "charge",
            state="completed",
            worker_id="dead",
            claim=claimed.claim,
            output={"id": "ch_9"},
        )
    h.clock.advance("31s")
    trace = await h.drain()
    assert trace is not None and trace.state == "dead"
    assert effects(shop) == ["refund ch_9"]  # unwound, the forward path never ran again
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_LEASE_LOST"
    assert "final attempt" in trace.last_error["message"]


async def test_on_postgres_a_crash_on_the_final_attempt_is_reoffered_and_unwinds(
    pg_engine: Engine,
) -> None:
    shop = Shop()
    checkout_job = checkout(shop, attempts=1)
    h = pg_engine.real_time_harness([checkout_job])
    r = await h.enqueue(checkout_job, {})
    driver = pg_engine.driver
    # the only forward attempt is claimed and its worker dies before it settles
    [claimed] = await driver.claim(
        queues=["default"], limit=1, worker_id="dead", visibility_timeout_ms=300
    )
    assert claimed.max_attempts == 1 + UNWIND_MARGIN
    assert await driver.steps.record(
        r.id,
        "charge",
        state="completed",
        worker_id="dead",
        claim=claimed.claim,
        output={"id": "ch_9"},
    )
    drained = await h.drain()
    assert drained is not None
    assert drained.state == "running"  # the lease holds
    await asyncio.sleep(0.32)  # the dead worker's lease lapses
    trace = await h.drain_until("dead")
    assert effects(shop) == ["refund ch_9"]  # unwound, the forward path never ran again
    assert trace.attempts == 2 and trace.steps["compensate:charge"].state == "completed"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_LEASE_LOST"
    assert "final attempt" in trace.last_error["message"]


async def test_once_with_an_unknown_outcome_stops_the_unwind_at_once_until_resolved(
    harness: Harness,
) -> None:
    shop = Shop()
    calls = {"ship": 0}

    def ship_once(signal: Signal) -> dict[str, str]:
        calls["ship"] += 1
        raise ConnectionError("did the label print?")

    @job(
        input=Order,
        idempotency_key=_key,
        compensates=True,
        name="once-ship",
        retry=Retry(attempts=3, delay=0),
    )
    async def once_ship(input: Order, step: Any, ctx: Any) -> None:
        await step.run("charge", shop.charge, compensate=shop.refund)
        await step.run(
            "ship",
            ship_once,
            once=True,
            compensate=lambda label, signal: shop.log.append(f"void {label['id']}"),
        )

    h = harness([once_ship])
    trace = await h(once_ship, {})
    assert calls["ship"] == 1
    assert trace.state == "dead"
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_COMPENSATION_FAILED"
    assert trace.last_error["meta"]["step"] == "ship"
    assert "resolve-step" in trace.last_error["fix"]
    assert trace.last_error["meta"]["original"]["code"] == "X_STEP_OUTCOME_UNKNOWN"
    assert effects(shop) == ["charge"]  # stopped at once: charge not refunded either
    attempts_when_stopped = trace.attempts

    with h.bound():
        await h.driver.introspect.resolve_step(trace.id, "ship", ran=True, output={"id": "lb_1"})  # type: ignore[attr-defined]
    await h.requeue(trace.id)
    again = await h.drain()
    assert again is not None
    trace = again
    assert trace.state == "dead"
    assert effects(shop) == ["charge", "void lb_1", "refund ch_1"]
    assert calls["ship"] == 1
    assert attempts_when_stopped == 3  # 1 (failed), 2 (unknown, for good), 3 (stopped)


async def test_a_dropped_job_unwinds_too_and_settles_failed(harness: Harness) -> None:
    shop = Shop()
    checkout_job = checkout(shop, attempts=1, dead_letter=False)
    trace = await harness([checkout_job])(checkout_job, {})
    assert trace.state == "failed"
    assert effects(shop)[-2:] == ["release rs_1", "refund ch_1"]


async def test_a_failure_before_any_compensable_step_writes_no_unwind(harness: Harness) -> None:
    @job(input=Order, idempotency_key=_key, compensates=True, retry=Retry(attempts=1))
    async def early(input: Order, step: Any, ctx: Any) -> None:
        raise RuntimeError("before anything")

    trace = await harness([early])(early, {})
    assert trace.state == "dead" and trace.attempts == 1
    assert "unwinding" not in trace.steps


async def test_a_compensate_that_is_not_callable_is_refused(harness: Harness) -> None:
    @job(input=Order, idempotency_key=_key, compensates=True, retry=Retry(attempts=1))
    async def bad(input: Order, step: Any, ctx: Any) -> None:
        await step.run("charge", lambda s: 1, compensate="refund")

    trace = await harness([bad])(bad, {})
    assert trace.last_error is not None
    assert trace.last_error["code"] == "X_JOB_DECLARATION_INVALID"
    assert "compensate" in trace.last_error["message"]
