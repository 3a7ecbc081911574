"""on_settled: completed / dead-lettered / dropped / refused, what the hook receives, after the
settle landed and under the job's tenant; three tries inside one on_settled_timeout, then
X_JOB_ON_SETTLED_FAILED logged with the outcome unchanged; never for a retry, a suspension, a
drain, a cancel or a settle that did not land — on the memory driver and on Postgres (``engine``);
what drives the frozen clock is memory-only, with a real-time variant on Postgres."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import uuid4

import pytest
from pydantic import BaseModel

from ultimat3.core import (
    XError,
    capture_log_events,
    current_actor,
    current_signal,
    current_tenant,
    new_id,
)
from ultimat3.jobs import Concurrency, Job, Retry, Settled, execute_job, job
from ultimat3.jobs.adapter import EnqueueRequest
from ultimat3.jobs.testing import JobHarness
from ultimat3_testkit.engine_drivers import Engine, EngineDriver


class Sync(BaseModel):
    org_id: str
    account: str = "a"


def _key(i: Sync) -> str:
    return f"sync:{i.org_id}:{i.account}"


class Hook:
    def __init__(self, driver: Any = None, *, fail: int = 0) -> None:
        self.seen: list[Settled[Any, Any]] = []
        self.states: list[str] = []
        self.ambient: list[tuple[str | None, str | None]] = []
        self.fail = fail
        self.driver = driver

    async def __call__(self, settled: Settled[Any, Any]) -> None:
        self.seen.append(settled)
        actor = current_actor()
        self.ambient.append((current_tenant(), actor.id if actor else None))
        assert current_signal() is settled.signal and not settled.signal.aborted
        if self.driver is not None:
            self.states.append((await self.driver.introspect.show(settled.job_id)).state)
        if self.fail > 0:
            self.fail -= 1
            raise ConnectionError("webhook endpoint down")


@pytest.fixture
def driver(engine: Engine) -> EngineDriver:
    """The memory driver, then Postgres: installed as JOB_DRIVER."""
    return engine.driver


def declare(body: Any, hook: Any, **over: Any) -> Job[Any, Any]:
    fields: dict[str, Any] = {
        "input": Sync,
        "idempotency_key": _key,
        "tenant": lambda i: i.org_id,
        "name": "settled-job",
        "on_settled": hook,
        "run": body,
    }
    fields.update(over)
    declared: Job[Any, Any] = job(**fields)
    return declared


async def test_completed_carries_the_input_and_the_result_after_the_ack_landed(
    engine: Engine,
) -> None:
    async def body(input: Sync, step: Any, ctx: Any) -> dict[str, int]:
        return {"rows": 3}

    hook = Hook(engine.driver)
    j = declare(body, hook)
    h = engine.harness([j])
    org = str(uuid4())
    trace = await h(j, {"org_id": org})
    assert trace.state == "done"
    [s] = hook.seen
    assert (s.outcome, s.result, s.error, s.code) == ("completed", {"rows": 3}, None, None)
    assert isinstance(s.input, Sync) and s.input.org_id == org
    assert (s.job, s.job_id, s.attempt, s.tenant_id) == ("settled-job", trace.id, 1, org)
    assert hook.states == ["done"]  # the row was settled before the hook ran
    assert hook.ambient == [(org, "job:settled-job")]  # under the job's tenant


async def test_dead_lettered_and_dropped_carry_the_rows_error_and_code(engine: Engine) -> None:
    async def body(input: Sync, step: Any, ctx: Any) -> None:
        raise XError("X_JOB_STEP_FAILED", "upstream said no")

    hook = Hook()
    dead = declare(body, hook, retry=Retry(attempts=2, delay=0))
    hook2 = Hook()
    dropped = declare(body, hook2, name="dropped", retry=Retry(attempts=1, dead_letter=False))
    h = engine.harness([dead, dropped])
    t1 = await h(dead, {"org_id": "o1"})
    t2 = await h(dropped, {"org_id": "o1"})
    [s1] = hook.seen  # once: the retry told nobody
    assert (s1.outcome, s1.code) == ("dead-lettered", "X_JOB_STEP_FAILED")
    assert s1.error == t1.last_error and s1.result is None and s1.attempt == 2
    [s2] = hook2.seen
    assert (s2.outcome, s2.code, t2.state) == ("dropped", "X_JOB_STEP_FAILED", "failed")


async def test_refused_is_a_busy_key_under_when_busy_fail_and_the_body_never_ran(
    driver: EngineDriver,
) -> None:
    ran: list[str] = []
    release = asyncio.Event()
    inside = asyncio.Event()

    async def body(input: Sync, step: Any, ctx: Any) -> None:
        ran.append(input.org_id)
        inside.set()
        await release.wait()

    hook = Hook()
    j = declare(
        body,
        hook,
        tenant="none",
        concurrency=Concurrency(key=lambda i: i.account, limit=1, when_busy="fail"),
    )
    await j.enqueue({"org_id": "first"})
    await j.enqueue({"org_id": "second"})
    [c1, c2] = await driver.claim(
        queues=["default"], limit=2, worker_id="w", visibility_timeout_ms=30_000
    )
    run1 = asyncio.ensure_future(execute_job(c1, j, driver=driver))
    await inside.wait()
    await execute_job(c2, j, driver=driver)
    release.set()
    await run1
    assert ran == ["first"]
    assert [(s.outcome, s.code) for s in hook.seen] == [
        ("refused", "X_JOB_KEY_BUSY"),
        ("completed", None),
    ]


async def test_input_is_none_when_the_stored_payload_no_longer_parses(engine: Engine) -> None:
    hook = Hook()

    async def body(input: Sync, step: Any, ctx: Any) -> None:
        return None

    j = declare(body, hook, tenant="none")
    h = engine.harness([j])
    with h.bound():
        await h.driver.enqueue(
            EnqueueRequest(
                id=new_id(),
                run_id=new_id(),
                name=j.name,
                queue="default",
                payload={"no": "org"},
                idempotency_key="k",
                max_attempts=3,
            )
        )
    await h.drain()
    [s] = hook.seen
    assert (s.outcome, s.input, s.code) == ("dead-lettered", None, "X_BODY_INVALID")


# memory only: the frozen clock moves past the sleep (variant on Postgres below)
async def test_never_called_for_a_retry_a_suspension_a_drain_or_a_cancel() -> None:
    hook = Hook()
    started = asyncio.Event()

    async def body(input: Sync, step: Any, ctx: Any) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        await step.sleep("1h")
        if input.account == "drain":
            started.set()
            await ctx.signal.wait()
            ctx.signal.throw_if_aborted()

    j = declare(body, hook, tenant="none", retry=Retry(attempts=3, delay=0))
    h = JobHarness(jobs=[j])
    t = await h(j, {"org_id": "o"})
    assert t.state == "suspended" and t.attempts == 1  # retried once, then suspended
    with h.bound():
        await h.driver.introspect.cancel(t.id, reason="not needed")  # type: ignore[attr-defined]
    d = await h.enqueue(j, {"org_id": "o", "account": "drain"})
    await h.drain()
    h.clock.advance("2h")
    with h.bound():
        await h.worker.run_pass()
        await started.wait()
        await h.worker.drain()
    assert (await h.trace(d.id)).state == "ready"
    assert hook.seen == []


async def test_on_postgres_never_called_for_a_retry_a_suspension_a_drain_or_a_cancel(
    pg_engine: Engine,
) -> None:
    hook = Hook()
    started = asyncio.Event()

    async def body(input: Sync, step: Any, ctx: Any) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        await step.sleep("200ms")
        if input.account == "drain":
            started.set()
            await ctx.signal.wait()
            ctx.signal.throw_if_aborted()

    j = declare(body, hook, tenant="none", retry=Retry(attempts=3, delay="50ms"))
    h = pg_engine.harness([j])
    t = await h(j, {"org_id": "o"})
    assert t.state == "suspended" and t.attempts == 1  # retried once, then suspended
    await pg_engine.driver.introspect.cancel(t.id, reason="not needed")
    d = await h.enqueue(j, {"org_id": "o", "account": "drain"})
    assert (await h.drain()).state == "suspended"  # type: ignore[union-attr]
    await asyncio.sleep(0.25)  # past both wake times
    with h.bound():
        await h.worker.run_pass()
        await started.wait()
        await h.worker.drain()
    assert (await h.trace(d.id)).state == "ready"
    assert (await h.trace(t.id)).state == "cancelled"
    assert hook.seen == []


async def test_never_called_for_a_settle_that_did_not_land(driver: EngineDriver) -> None:
    hook = Hook()

    async def body(input: Sync, step: Any, ctx: Any) -> None:
        await driver.introspect.cancel(ctx.job_id, reason="pulled from under it")

    j = declare(body, hook, tenant="none")
    await j.enqueue({"org_id": "o"})
    [claimed] = await driver.claim(
        queues=["default"], limit=1, worker_id="w", visibility_timeout_ms=30_000
    )
    outcome = await execute_job(claimed, j, driver=driver)
    assert (outcome.outcome, outcome.landed) == ("done", False)
    assert hook.seen == []


async def test_three_tries_back_to_back_then_the_outcome_stands(engine: Engine) -> None:
    async def body(input: Sync, step: Any, ctx: Any) -> str:
        return "ok"

    flaky = Hook(fail=2)
    j = declare(body, flaky, tenant="none")
    with capture_log_events() as events:
        trace = await engine.harness([j])(j, {"org_id": "o"})
    assert len(flaky.seen) == 3 and trace.state == "done"
    assert not [e for e in events if e["event"] == "jobs.on-settled.failed"]

    broken = Hook(fail=99)
    j2 = declare(body, broken, tenant="none", name="broken")
    with capture_log_events() as events:
        trace = await engine.harness([j2])(j2, {"org_id": "o"})
    assert len(broken.seen) == 3
    assert trace.state == "done" and trace.result == "ok"  # the outcome never changes
    [failed] = [e for e in events if e["event"] == "jobs.on-settled.failed"]
    assert failed["code"] == "X_JOB_ON_SETTLED_FAILED"
    assert failed["level"] == "error"
    assert failed["tries"] == 3 and failed["outcome"] == "completed"
    assert "webhook endpoint down" in failed["error"]
    assert failed["job"] == "broken" and failed["fix"]


async def test_the_deadline_covers_all_three_tries_and_aborts_the_signal(engine: Engine) -> None:
    reasons: list[str] = []
    cancelled: list[bool] = []

    async def slow(settled: Settled[Any, Any]) -> None:
        try:
            reasons.append((await settled.signal.wait()).code)
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def body(input: Sync, step: Any, ctx: Any) -> None:
        return None

    j = declare(body, slow, tenant="none", on_settled_timeout="50ms")
    with capture_log_events() as events:
        trace = await engine.harness([j])(j, {"org_id": "o"})
    assert trace.state == "done"
    assert reasons == ["X_JOB_TIMEOUT"] and cancelled == [True]  # one try: the deadline is shared
    [failed] = [e for e in events if e["event"] == "jobs.on-settled.failed"]
    assert failed["tries"] == 1 and "X_JOB_TIMEOUT" in failed["error"]


async def test_a_compensating_job_is_told_once_when_the_unwind_ends(engine: Engine) -> None:
    hook = Hook()
    undone: list[str] = []

    async def body(input: Sync, step: Any, ctx: Any) -> None:
        await step.run("charge", lambda s: "ch_1", compensate=lambda out: undone.append(out))
        raise RuntimeError("ship failed")

    j = declare(body, hook, tenant="none", compensates=True, retry=Retry(attempts=1))
    trace = await engine.harness([j])(j, {"org_id": "o"})
    assert undone == ["ch_1"] and trace.attempts == 2
    [s] = hook.seen
    assert s.outcome == "dead-lettered" and "ship failed" in (s.error or {})["message"]


async def test_a_retry_tells_nobody_and_the_hook_sees_its_row_settled(engine: Engine) -> None:
    hook = Hook(engine.driver)

    async def body(input: Sync, step: Any, ctx: Any) -> int:
        if ctx.attempt == 1:
            raise RuntimeError("once")
        return 7

    j = declare(body, hook, retry=Retry(attempts=2, delay="50ms"))
    trace = await engine.harness([j])(j, {"org_id": "o9"})
    assert trace.state == "done"
    assert [(s.outcome, s.result, s.attempt) for s in hook.seen] == [("completed", 7, 2)]
    assert hook.states == ["done"] and hook.ambient == [("o9", "job:settled-job")]


async def test_never_called_for_a_dead_letter_that_did_not_land(driver: EngineDriver) -> None:
    hook = Hook()

    async def body(input: Sync, step: Any, ctx: Any) -> None:
        await driver.introspect.cancel(ctx.job_id, reason="pulled")
        raise RuntimeError("and then it failed")

    j = declare(body, hook, tenant="none", retry=Retry(attempts=1))
    await j.enqueue({"org_id": "o"})
    [claimed] = await driver.claim(
        queues=["default"], limit=1, worker_id="w", visibility_timeout_ms=30_000
    )
    outcome = await execute_job(claimed, j, driver=driver)
    assert (outcome.outcome, outcome.landed) == ("dead", False)
    assert hook.seen == []
