"""execute_job, the one execution path: retries, terminal codes, the dead letter, timeouts,
drains, tenants at run, heartbeats and lost leases, progress, settles, spans and metrics — on
the memory driver and on Postgres (``engine``); what needs the frozen clock is memory-only, with a
real-time variant on Postgres."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any
from uuid import UUID, uuid4

import pytest
from pydantic import BaseModel

from ultimat3.core import (
    AbortController,
    FrozenClock,
    Signal,
    XError,
    capture_log_events,
    register_error_retry,
    swap_adapter,
    to_epoch_ms,
    use_clock,
)
from ultimat3.jobs import (
    ExecutionSettings,
    Job,
    JobContext,
    Retry,
    RunOutcome,
    execute_job,
    job,
)
from ultimat3.jobs._run import heartbeat as _heartbeat
from ultimat3.jobs.adapter import JOB_DRIVER, ClaimedJob, EnqueueRequest
from ultimat3.jobs.memory import MemoryJobDriver, memory_job_driver
from ultimat3_testkit.engine_drivers import Engine, EngineDriver


@pytest.fixture(autouse=True)
def _classified() -> None:
    """Registered per test: another module's test may reset the registry meanwhile."""
    register_error_retry(
        {"X_TEST_EXEC_TERMINAL": "terminal", "X_TEST_EXEC_RETRY_AFTER": "retry-after"}
    )


class Org(BaseModel):
    org_id: UUID


@pytest.fixture
def clock() -> Iterator[FrozenClock]:
    c = FrozenClock()
    with use_clock(c):
        yield c


@pytest.fixture
def memory(clock: FrozenClock) -> Iterator[MemoryJobDriver]:
    """The memory driver alone, for the tests that drive its frozen clock."""
    d = memory_job_driver()
    with swap_adapter(JOB_DRIVER, d):
        yield d


@pytest.fixture
def driver(engine: Engine) -> EngineDriver:
    """The memory driver, then Postgres: installed as JOB_DRIVER."""
    return engine.driver


def declare(body: Any, **over: Any) -> Job[Any, Any]:
    fields: dict[str, Any] = {
        "input": Org,
        "idempotency_key": lambda i: f"k:{i.org_id}",
        "tenant": lambda i: str(i.org_id),
        "name": "exec-job",
        "run": body,
    }
    fields.update(over)
    declared: Job[Any, Any] = job(**fields)
    return declared


async def claim_one(driver: Any, j: Job[Any, Any], vt: int = 30_000) -> ClaimedJob:
    await j.enqueue({"org_id": str(uuid4())})
    claimed = await driver.claim(
        queues=[j.queue], limit=1, worker_id="w1", visibility_timeout_ms=vt
    )
    assert len(claimed) == 1
    return claimed[0]  # type: ignore[no-any-return]


async def run_once(
    driver: Any, j: Job[Any, Any], settings: ExecutionSettings | None = None
) -> tuple[RunOutcome, Any]:
    claimed = await claim_one(driver, j)
    outcome = await execute_job(claimed, j, driver=driver, settings=settings)
    return outcome, await driver.introspect.show(claimed.id)


def fails_with(exc: BaseException) -> Any:
    async def body(input: Org, step: Any, ctx: Any) -> None:
        raise exc

    return body


# --- retries and the dead letter -----------------------------------------------------------------


# memory only: the frozen clock pins run_at exactly (variant on Postgres below)
async def test_a_failed_attempt_is_retried_after_the_backoff(
    memory: MemoryJobDriver, clock: FrozenClock
) -> None:
    driver = memory
    j = declare(
        fails_with(RuntimeError("boom")),
        retry=Retry(attempts=3, delay="2s", backoff="exponential", jitter="none"),
    )
    outcome, row = await run_once(driver, j)
    assert outcome.outcome == "retry" and outcome.landed
    assert outcome.delay_ms == 2000
    assert row.state == "ready"
    assert to_epoch_ms(row.run_at) == clock.now_ms() + 2000
    assert row.last_error["message"] == "RuntimeError: boom"
    clock.advance("2s")
    claimed = await driver.claim(
        queues=["default"], limit=1, worker_id="w1", visibility_timeout_ms=1000
    )
    outcome = await execute_job(claimed[0], j, driver=driver)
    assert outcome.delay_ms == 4000  # the exponential curve, attempt 2


async def test_on_postgres_a_failed_attempt_is_not_claimable_before_its_backoff(
    pg_engine: Engine,
) -> None:
    driver = pg_engine.driver
    j = declare(
        fails_with(RuntimeError("boom")),
        retry=Retry(attempts=3, delay="300ms", backoff="exponential", jitter="none"),
    )
    claimed = await claim_one(driver, j)
    outcome = await execute_job(claimed, j, driver=driver)
    settled_at = await driver.now_ms()
    row = await driver.introspect.show(claimed.id)
    assert (outcome.outcome, outcome.landed, outcome.delay_ms) == ("retry", True, 300)
    assert row.state == "ready" and row.attempts == 1
    assert row.last_error is not None
    assert row.last_error["message"] == "RuntimeError: boom"
    assert claimed.claimed_at_ms + 300 <= to_epoch_ms(row.run_at) <= settled_at + 300
    assert (
        await driver.claim(queues=["default"], limit=1, worker_id="w2", visibility_timeout_ms=1000)
        == []
    )  # backing off: not handed out early
    await asyncio.sleep(max(0, to_epoch_ms(row.run_at) - await driver.now_ms()) / 1000 + 0.02)
    [again] = await driver.claim(
        queues=["default"], limit=1, worker_id="w2", visibility_timeout_ms=1000
    )
    assert (again.id, again.attempt) == (claimed.id, 2)
    assert (await execute_job(again, j, driver=driver)).delay_ms == 600  # the curve, attempt 2


@pytest.mark.parametrize(
    ("backoff", "delays"), [("linear", [50, 100, 150]), ("fixed", [50, 50, 50])]
)
async def test_the_declared_curve_drives_the_backoff(
    engine: Engine, backoff: str, delays: list[int]
) -> None:
    driver = engine.driver
    j = declare(
        fails_with(RuntimeError("x")),
        retry=Retry(attempts=4, delay="50ms", backoff=backoff, jitter="none"),  # type: ignore[arg-type]
    )
    await j.enqueue({"org_id": str(uuid4())})
    seen = []
    for _ in delays:
        [claimed] = await driver.claim(
            queues=["default"], limit=1, worker_id="w", visibility_timeout_ms=1000
        )
        outcome = await execute_job(claimed, j, driver=driver)
        seen.append(outcome.delay_ms)
        await engine.advance(outcome.delay_ms or 0)
    assert seen == delays


async def test_equal_jitter_keeps_half_the_wait_fixed(driver: EngineDriver) -> None:
    j = declare(fails_with(RuntimeError("x")), retry=Retry(attempts=3, delay="10s"))
    outcome, _ = await run_once(driver, j)
    assert outcome.delay_ms is not None
    assert 5000 <= outcome.delay_ms <= 10_000


async def test_a_terminal_code_stops_on_the_attempt_that_failed(driver: EngineDriver) -> None:
    j = declare(fails_with(XError("X_TEST_EXEC_TERMINAL", "wrong password")))
    outcome, row = await run_once(driver, j)
    assert outcome.outcome == "dead"
    assert row.state == "dead"
    assert row.attempts == 1
    assert row.last_error["code"] == "X_TEST_EXEC_TERMINAL"
    assert "not retried" in row.last_error["message"]
    assert row.last_error["meta"]["not_retried"] == "X_TEST_EXEC_TERMINAL is classified terminal"


async def test_an_unclassified_code_is_retried(driver: EngineDriver) -> None:
    j = declare(fails_with(XError("X_TEST_EXEC_UNCLASSIFIED", "flaky")))
    outcome, row = await run_once(driver, j)
    assert outcome.outcome == "retry"
    assert row.state == "ready"


async def test_a_retry_after_code_waits_what_the_responder_said_clamped_by_max_delay(
    driver: EngineDriver,
) -> None:
    told = declare(
        fails_with(XError("X_TEST_EXEC_RETRY_AFTER", "slow down", meta={"retry_after_seconds": 7})),
        retry=Retry(attempts=3, max_delay="1m"),
    )
    outcome, _ = await run_once(driver, told)
    assert outcome.delay_ms == 7000
    clamped = declare(
        fails_with(XError("X_RATE_LIMITED", "slow down", meta={"retry_after_seconds": 600})),
        retry=Retry(attempts=3, max_delay="1m"),
        name="exec-clamped",
    )
    outcome, _ = await run_once(driver, clamped)
    assert outcome.outcome == "release"  # throttled: deferred uncounted (docs/jobs.md)
    assert outcome.delay_ms == 60_000


async def test_exhausted_attempts_are_dead_lettered_with_the_error(driver: EngineDriver) -> None:
    j = declare(fails_with(RuntimeError("still down")), retry=Retry(attempts=2, delay=0))
    first, _ = await run_once(driver, j)
    assert first.outcome == "retry"
    [claimed] = await driver.claim(
        queues=["default"], limit=1, worker_id="w", visibility_timeout_ms=1000
    )
    outcome = await execute_job(claimed, j, driver=driver)
    row = await driver.introspect.show(claimed.id)
    assert outcome.outcome == "dead"
    assert row.state == "dead"
    assert row.attempts == 2
    assert row.last_error is not None
    assert row.last_error["message"] == "RuntimeError: still down"
    assert row.last_error["meta"]["attempts"] == 2


async def test_dead_letter_false_settles_failed(driver: EngineDriver) -> None:
    j = declare(fails_with(RuntimeError("x")), retry=Retry(attempts=1, dead_letter=False))
    outcome, row = await run_once(driver, j)
    assert outcome.outcome == "failed"
    assert row.state == "failed"


async def test_a_completed_body_is_acked_with_its_json_result(driver: EngineDriver) -> None:
    async def body(input: Org, step: Any, ctx: Any) -> dict[str, Any]:
        return {"org": input.org_id, "rows": 3}

    outcome, row = await run_once(driver, declare(body))
    assert outcome.outcome == "done"
    assert row.state == "done"
    assert row.result == {"org": row.payload["org_id"], "rows": 3}


async def test_an_unserialisable_result_is_terminal(driver: EngineDriver) -> None:
    async def body(input: Org, step: Any, ctx: Any) -> Any:
        return {1, b"x"}

    outcome, row = await run_once(driver, declare(body, retry=Retry(attempts=3)))
    assert outcome.outcome == "dead"
    assert row.last_error["code"] == "X_STEP_OUTPUT_UNSERIALIZABLE"


# --- refused before the body ---------------------------------------------------------------------


async def _queue_raw(driver: EngineDriver, j: Job[Any, Any], payload: Any, tenant: str) -> None:
    await driver.enqueue(
        EnqueueRequest(
            id=str(uuid4()),
            run_id=str(uuid4()),
            name=j.name,
            queue=j.queue,
            payload=payload,
            idempotency_key="raw",
            max_attempts=3,
            tenant_id=tenant,
        )
    )


async def test_a_row_queued_under_another_tenant_is_refused_terminally_before_the_body(
    driver: EngineDriver,
) -> None:
    ran: list[int] = []

    async def body(input: Org, step: Any, ctx: Any) -> None:
        ran.append(1)

    j = declare(body)
    await _queue_raw(driver, j, {"org_id": str(uuid4())}, tenant="org-b")
    [claimed] = await driver.claim(
        queues=["default"], limit=1, worker_id="w", visibility_timeout_ms=1000
    )
    outcome = await execute_job(claimed, j, driver=driver)
    row = await driver.introspect.show(claimed.id)
    assert ran == []
    assert outcome.outcome == "dead"
    assert row.attempts == 1
    assert row.last_error is not None
    assert row.last_error["code"] == "X_JOB_TENANT_MISMATCH"


async def test_a_payload_that_no_longer_parses_is_refused_terminally(
    driver: EngineDriver,
) -> None:
    j = declare(fails_with(RuntimeError("never")))
    await _queue_raw(driver, j, {"org_id": "not-a-uuid"}, tenant="t")
    [claimed] = await driver.claim(
        queues=["default"], limit=1, worker_id="w", visibility_timeout_ms=1000
    )
    outcome = await execute_job(claimed, j, driver=driver)
    assert outcome.outcome == "dead"
    assert outcome.error is not None and outcome.error["code"] == "X_BODY_INVALID"


async def test_a_job_this_worker_does_not_know_goes_back_for_another(
    driver: EngineDriver,
) -> None:
    j = declare(fails_with(RuntimeError("x")), retry=Retry(attempts=2))
    claimed = await claim_one(driver, j)
    outcome = await execute_job(claimed, None, driver=driver)
    assert outcome.outcome == "retry"
    assert outcome.error is not None
    assert outcome.error["code"] == "X_JOB_DECLARATION_INVALID"
    assert "exec-job" in outcome.error["message"]


# --- the deadline --------------------------------------------------------------------------------


class Recorder:
    """A driver wrapper that notes the order of events against the run's signal."""

    def __init__(self, inner: EngineDriver) -> None:
        self.inner = inner
        self.events: list[str] = []
        self.signal: Signal | None = None
        self.ack_lands = True
        self.heartbeat_mode = "ok"
        self.heartbeats = 0
        self.progress_writes: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def nack(self, job_id: str, **kw: Any) -> bool:
        aborted = self.signal is not None and self.signal.aborted
        self.events.append(f"nack:{kw['outcome']}:aborted={aborted}")
        return await self.inner.nack(job_id, **kw)

    async def ack(self, job_id: str, **kw: Any) -> bool:
        self.events.append("ack")
        if not self.ack_lands:
            return False
        return await self.inner.ack(job_id, **kw)

    async def heartbeat(self, job_id: str, **kw: Any) -> bool:
        self.heartbeats += 1
        if self.heartbeat_mode == "raise":
            raise ConnectionError("database went away")
        if self.heartbeat_mode == "hang":
            await asyncio.sleep(3600)
        if self.heartbeat_mode == "refuse":
            return False
        return await self.inner.heartbeat(job_id, **kw)

    async def progress(self, job_id: str, **kw: Any) -> bool:
        self.progress_writes.append(dict(kw["progress"]))
        return await self.inner.progress(job_id, **kw)


async def test_a_timeout_aborts_the_signal_then_fails_the_attempt_then_cancels_the_body(
    driver: EngineDriver,
) -> None:
    spy = Recorder(driver)

    async def body(input: Org, step: Any, ctx: Any) -> None:
        spy.signal = ctx.signal
        ctx.signal.add_listener(lambda reason: spy.events.append(f"abort:{reason.code}"))
        try:
            await asyncio.sleep(30)  # ignores the signal
        except asyncio.CancelledError:
            spy.events.append("cancelled")
            raise

    j = declare(body, timeout=30, retry=Retry(attempts=2))
    claimed = await claim_one(driver, j)
    outcome = await execute_job(claimed, j, driver=spy)
    assert spy.events == ["abort:X_JOB_TIMEOUT", "nack:retry:aborted=True", "cancelled"]
    assert outcome.outcome == "retry"
    assert outcome.error is not None and outcome.error["code"] == "X_JOB_TIMEOUT"


async def test_a_body_reading_the_signal_stops_at_the_deadline(driver: EngineDriver) -> None:
    async def body(input: Org, step: Any, ctx: Any) -> None:
        reason = await ctx.signal.wait()
        raise reason

    outcome, row = await run_once(driver, declare(body, timeout=20, retry=Retry(attempts=1)))
    assert outcome.outcome == "dead"
    assert row.last_error["code"] == "X_JOB_TIMEOUT"


async def test_after_the_deadline_a_step_refuses_to_write(driver: EngineDriver) -> None:
    refused: list[str] = []

    async def body(input: Org, step: Any, ctx: Any) -> None:
        await ctx.signal.wait()
        try:
            await step.run("late", lambda s: 1)
        except XError as exc:
            refused.append(exc.code)
            raise

    claimed = await claim_one(driver, declare(body, timeout=20))
    await execute_job(claimed, declare(body, timeout=20), driver=driver)
    assert refused == ["X_ABORTED"]
    assert "late" not in (await driver.introspect.show(claimed.id)).steps


async def test_a_body_that_swallows_the_cancel_is_named_abandoned(driver: EngineDriver) -> None:
    release = asyncio.Event()

    async def stubborn(input: Org, step: Any, ctx: Any) -> None:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.01)

    j = declare(stubborn, timeout=20)
    claimed = await claim_one(driver, j)
    with capture_log_events() as events:
        outcome = await execute_job(
            claimed, j, driver=driver, settings=ExecutionSettings(abandon_grace_ms=30)
        )
    release.set()
    await asyncio.sleep(0.05)
    assert outcome.outcome == "retry"
    abandoned = [e for e in events if e["event"] == "jobs.timeout.abandoned"]
    assert len(abandoned) == 1
    assert abandoned[0]["level"] == "warning"
    assert abandoned[0]["job_id"] == claimed.id
    assert abandoned[0]["how"]


async def test_a_body_that_stops_on_cancel_logs_nothing(driver: EngineDriver) -> None:
    async def body(input: Org, step: Any, ctx: Any) -> None:
        await asyncio.sleep(30)

    j = declare(body, timeout=20)
    claimed = await claim_one(driver, j)
    with capture_log_events() as events:
        await execute_job(claimed, j, driver=driver)
    assert [e for e in events if e["event"] == "jobs.timeout.abandoned"] == []


# --- drain ---------------------------------------------------------------------------------------


async def test_a_drained_body_that_stops_goes_back_with_the_attempt_uncounted(
    driver: EngineDriver,
) -> None:
    async def body(input: Org, step: Any, ctx: Any) -> None:
        await step.run("first", lambda s: 1)
        reason = await ctx.signal.wait()
        raise RuntimeError(f"my own error for {reason.code}")  # the verdict is the signal's

    j = declare(body, retry=Retry(attempts=1))
    claimed = await claim_one(driver, j)
    controller = AbortController()
    task = asyncio.ensure_future(execute_job(claimed, j, driver=driver, controller=controller))
    await asyncio.sleep(0.02)
    controller.abort(XError("X_DRAINING", "worker w1 is draining (SIGTERM)"))
    outcome = await task
    row = await driver.introspect.show(claimed.id)
    assert outcome.outcome == "release"
    assert row.state == "ready"
    assert row.attempts == 0
    assert to_epoch_ms(row.run_at) <= await driver.now_ms()  # due again at once
    assert row.steps["first"].state == "completed"


async def test_a_drained_body_ignoring_the_signal_is_cancelled_at_the_budget(
    driver: EngineDriver,
) -> None:
    async def body(input: Org, step: Any, ctx: Any) -> None:
        await asyncio.sleep(30)

    j = declare(body)
    claimed = await claim_one(driver, j)
    controller = AbortController()
    controller.abort(XError("X_DRAINING", "draining"))
    outcome = await execute_job(
        claimed,
        j,
        driver=driver,
        controller=controller,
        settings=ExecutionSettings(drain_timeout_ms=20),
    )
    assert outcome.outcome == "release"


async def test_a_step_finishing_inside_the_drain_budget_still_lands(
    driver: EngineDriver,
) -> None:
    async def body(input: Org, step: Any, ctx: Any) -> None:
        async def save(signal: Signal) -> str:
            await asyncio.sleep(0.03)  # the drain lands meanwhile
            return "saved"

        await step.run("save", save)
        ctx.signal.throw_if_aborted()

    j = declare(body)
    claimed = await claim_one(driver, j)
    controller = AbortController()
    task = asyncio.ensure_future(execute_job(claimed, j, driver=driver, controller=controller))
    await asyncio.sleep(0.01)
    controller.abort(XError("X_DRAINING", "draining"))
    assert (await task).outcome == "release"
    steps = (await driver.introspect.show(claimed.id)).steps
    assert steps["save"].state == "completed"


# --- settles -------------------------------------------------------------------------------------


async def test_a_landed_ack_leaves_the_signal_live_and_an_unowned_one_aborts_it(
    driver: EngineDriver,
) -> None:
    signals: list[Signal] = []

    async def body(input: Org, step: Any, ctx: Any) -> None:
        signals.append(ctx.signal)

    j = declare(body)
    await execute_job(await claim_one(driver, j), j, driver=driver)
    assert signals[-1].aborted is False
    spy = Recorder(driver)
    spy.ack_lands = False
    j2 = declare(body, name="exec-unowned")
    with capture_log_events() as events:
        outcome = await execute_job(await claim_one(driver, j2), j2, driver=spy)
    assert outcome.landed is False
    assert signals[-1].reason is not None and signals[-1].reason.code == "X_ABORTED"
    assert [e["event"] for e in events] == ["jobs.settle.unowned"]


async def test_a_failed_attempt_aborts_the_signal(driver: EngineDriver) -> None:
    signals: list[Signal] = []

    async def body(input: Org, step: Any, ctx: Any) -> None:
        signals.append(ctx.signal)
        raise RuntimeError("x")

    await run_once(driver, declare(body))
    assert signals[0].reason is not None and signals[0].reason.code == "X_ABORTED"


async def test_progress_writes_at_most_once_a_second_and_always_the_last(
    driver: EngineDriver,
) -> None:
    now = [0.0]
    spy = Recorder(driver)

    async def body(input: Org, step: Any, ctx: Any) -> None:
        ctx.progress(1, 10)
        ctx.progress(2, 10)
        now[0] += 1.0
        ctx.progress(3, 10, "a third")
        ctx.progress(4, 10)
        ctx.progress(5, 10)

    j = declare(body)
    claimed = await claim_one(driver, j)
    settings = ExecutionSettings(monotonic=lambda: now[0])
    await execute_job(claimed, j, driver=spy, settings=settings)
    assert [w["done"] for w in spy.progress_writes] == [1, 3, 5]
    assert spy.progress_writes[1] == {"done": 3, "total": 10, "note": "a third"}
    assert (await driver.introspect.show(claimed.id)).progress == {
        "done": 5,
        "total": 10,
        "note": None,
    }


async def test_progress_refuses_nonsense(driver: EngineDriver) -> None:
    async def body(input: Org, step: Any, ctx: Any) -> None:
        ctx.progress(-1, 10)

    outcome, _ = await run_once(driver, declare(body))
    assert outcome.error is not None and outcome.error["code"] == "X_INVARIANT"


# --- heartbeats and the lease --------------------------------------------------------------------


async def _hold(driver: Any, mode: str, vt: int = 90) -> tuple[RunOutcome, list[str], Recorder]:
    spy = Recorder(driver)
    spy.heartbeat_mode = mode
    reasons: list[str] = []

    async def body(input: Org, step: Any, ctx: Any) -> None:
        reason = await asyncio.wait_for(ctx.signal.wait(), timeout=5)
        reasons.append(reason.code)
        raise reason

    j = declare(body, name=f"exec-hb-{mode}")
    claimed = await claim_one(driver, j, vt=vt)
    outcome = await execute_job(
        claimed,
        j,
        driver=spy,
        settings=ExecutionSettings(visibility_timeout_ms=vt),
    )
    return outcome, reasons, spy


class FakeCounter:
    def __init__(self) -> None:
        self.adds: list[tuple[int, dict[str, Any]]] = []

    def add(self, amount: int, attributes: dict[str, Any] | None = None) -> None:
        self.adds.append((amount, dict(attributes or {})))


async def test_heartbeats_renew_every_third_of_the_window(driver: EngineDriver) -> None:
    spy = Recorder(driver)

    async def body(input: Org, step: Any, ctx: Any) -> None:
        await asyncio.sleep(0.2)

    j = declare(body)
    claimed = await claim_one(driver, j, vt=150)
    await execute_job(
        claimed,
        j,
        driver=spy,
        settings=ExecutionSettings(visibility_timeout_ms=150),
    )
    assert 3 <= spy.heartbeats <= 5


@pytest.mark.parametrize("mode", ["raise", "hang"])
async def test_a_whole_window_without_a_renewal_loses_the_lease(
    driver: EngineDriver, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    counter = FakeCounter()
    monkeypatch.setattr(_heartbeat, "_lost_counter", counter)
    with capture_log_events() as events:
        outcome, reasons, _ = await _hold(driver, mode)
    assert reasons == ["X_JOB_LEASE_LOST"]
    assert outcome.outcome == "lost"
    names = [e["event"] for e in events]
    assert names[-1] == "jobs.lease.lost"
    assert [e["level"] for e in events if e["event"] == "jobs.lease.lost"] == ["error"]
    if mode == "raise":
        assert "jobs.heartbeat.failed" in names
    assert counter.adds == [(1, {"queue": "default"})]


async def test_a_refused_renewal_loses_the_lease_at_once(
    driver: EngineDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_heartbeat, "_lost_counter", FakeCounter())
    outcome, reasons, spy = await _hold(driver, "refuse", vt=300)
    assert reasons == ["X_JOB_LEASE_LOST"]
    assert spy.heartbeats == 1
    assert outcome.outcome == "lost"


async def test_a_run_cancelled_under_its_feet_loses_its_lease_at_the_next_renewal(
    driver: EngineDriver,
) -> None:
    inside = asyncio.Event()
    reasons: list[str] = []

    async def body(input: Org, step: Any, ctx: Any) -> None:
        inside.set()
        reason = await asyncio.wait_for(ctx.signal.wait(), timeout=5)
        reasons.append(reason.code)
        raise reason

    j = declare(body, name="exec-cancelled")
    claimed = await claim_one(driver, j, vt=300)
    with capture_log_events() as events:
        task = asyncio.ensure_future(
            execute_job(
                claimed, j, driver=driver, settings=ExecutionSettings(visibility_timeout_ms=300)
            )
        )
        await inside.wait()
        await driver.introspect.cancel(claimed.id, reason="an operator pulled it")
        outcome = await task
    assert reasons == ["X_JOB_LEASE_LOST"]  # the store refused the renewal: the claim is gone
    assert (outcome.outcome, outcome.landed) == ("lost", False)
    assert [e["event"] for e in events if e["event"] == "jobs.lease.lost"] == ["jobs.lease.lost"]
    row = await driver.introspect.show(claimed.id)
    assert row.state == "cancelled"
    assert row.last_error is not None and row.last_error["code"] == "X_ABORTED"


async def test_a_lapsed_claim_is_reoffered_and_the_old_claims_settle_never_lands(
    engine: Engine,
) -> None:
    driver = engine.driver
    runs: list[int] = []

    async def body(input: Org, step: Any, ctx: JobContext) -> int:
        runs.append(ctx.attempt)
        return ctx.attempt

    j = declare(body, name="exec-lapsed")
    stale = await claim_one(driver, j, vt=300)  # its worker stalls past the window
    assert (
        await driver.claim(
            queues=["default"], limit=1, worker_id="w2", visibility_timeout_ms=30_000
        )
        == []
    )  # the lease is live: nobody else gets the run
    await engine.advance("300ms")
    [fresh] = await driver.claim(
        queues=["default"], limit=1, worker_id="w2", visibility_timeout_ms=30_000
    )
    assert (fresh.id, fresh.attempt) == (stale.id, 2) and fresh.claim != stale.claim
    with capture_log_events() as events:
        late = await execute_job(stale, j, driver=driver)  # the stalled worker wakes up
    assert (late.outcome, late.landed) == ("done", False)
    assert "jobs.settle.unowned" in [e["event"] for e in events]
    row = await driver.introspect.show(stale.id)
    assert (row.state, row.worker_id) == ("running", "w2")  # the fresh claim still holds it
    done = await execute_job(fresh, j, driver=driver)
    assert (done.outcome, done.landed) == ("done", True)
    row = await driver.introspect.show(stale.id)
    assert (row.state, row.result, row.attempts) == ("done", 2, 2)
    assert runs == [1, 2]


async def test_on_postgres_heartbeats_keep_a_run_past_its_visibility_window(
    pg_engine: Engine,
) -> None:
    driver = pg_engine.driver
    inside = asyncio.Event()

    async def body(input: Org, step: Any, ctx: Any) -> str:
        inside.set()
        await asyncio.sleep(1.0)  # more than three 300 ms windows
        return "finished"

    j = declare(body, name="exec-long")
    claimed = await claim_one(driver, j, vt=300)
    task = asyncio.ensure_future(
        execute_job(
            claimed, j, driver=driver, settings=ExecutionSettings(visibility_timeout_ms=300)
        )
    )
    await inside.wait()
    stolen = []
    while not task.done():  # another worker keeps asking for lapsed runs
        stolen += await driver.claim(
            queues=["default"], limit=1, worker_id="thief", visibility_timeout_ms=30_000
        )
        await asyncio.sleep(0.05)
    outcome = await task
    assert stolen == []
    assert (outcome.outcome, outcome.landed) == ("done", True)
    row = await driver.introspect.show(claimed.id)
    assert (row.state, row.attempts, row.result) == ("done", 1, "finished")


# --- spans and metrics: tests/test_observability.py (the OpenTelemetry SDK's in-memory exporters)


async def test_a_sleep_wakes_at_the_claim_plus_the_elapsed_monotonic_time(engine: Engine) -> None:
    driver = engine.driver
    now = [100.0]

    async def body(input: Org, step: Any, ctx: Any) -> None:
        now[0] += 5.0  # five seconds of work since the claim, on the worker's own clock
        await step.sleep("1m")

    j = declare(body)
    claimed = await claim_one(driver, j)
    if engine.clock is not None:
        engine.clock.advance("1h")  # the wall clock is not what the wake time is read from
    outcome = await execute_job(
        claimed, j, driver=driver, settings=ExecutionSettings(monotonic=lambda: now[0])
    )
    row = await driver.introspect.show(claimed.id)
    assert outcome.outcome == "suspend"
    assert row.steps["sleep:1"].output == {"wake_at_ms": claimed.claimed_at_ms + 65_000}


async def test_a_step_signal_hears_the_runs_cancellation(driver: EngineDriver) -> None:
    heard: list[str] = []

    async def body(input: Org, step: Any, ctx: Any) -> None:
        async def waits(signal: Signal) -> None:
            heard.append((await signal.wait()).code)

        await step.run("waits", waits)

    j = declare(body, timeout=20, step_timeout="1m")
    await execute_job(await claim_one(driver, j), j, driver=driver)
    assert heard == ["X_JOB_TIMEOUT"]


class _SlowAck:
    """Its ack lands at once but answers late: a batched ack committing while a renewal flies."""

    def __init__(self, inner: EngineDriver) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def ack(self, job_id: str, **kw: Any) -> bool:
        landed = await self.inner.ack(job_id, **kw)
        await asyncio.sleep(0.2)
        return landed


async def test_a_renewal_refused_because_our_own_ack_landed_is_not_a_lost_lease(
    driver: EngineDriver,
) -> None:
    slow = _SlowAck(driver)

    async def body(input: Org, step: Any, ctx: Any) -> str:
        return "ok"

    j = declare(body, name="slow-ack")
    claimed = await claim_one(driver, j, vt=150)
    with capture_log_events() as events:
        outcome = await execute_job(
            claimed,
            j,
            driver=slow,
            settings=ExecutionSettings(visibility_timeout_ms=150),
        )
    assert outcome.outcome == "done"
    assert outcome.landed
    assert [e for e in events if e["event"] == "jobs.lease.lost"] == []
    assert (await driver.introspect.show(claimed.id)).state == "done"
