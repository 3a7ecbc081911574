"""Fleet-wide concurrency at claim: the lease key, 'wait' and 'fail', a run's own slot, key()
throwing, the TTL and its renewal, a lost slot, the release at the settle — on the memory driver
and on Postgres (``engine``); the TTL on the frozen clock is memory-only, with a real-time variant
on Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import (
    FrozenClock,
    Signal,
    XError,
    capture_log_events,
    swap_adapter,
    to_epoch_ms,
    use_clock,
)
from ultimat3.jobs import Concurrency, ExecutionSettings, Job, Retry, execute_job, job, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER, ClaimedJob, JobDriver
from ultimat3.jobs.memory import memory_job_driver
from ultimat3_testkit.engine_drivers import Engine, EngineDriver


class Acct(BaseModel):
    account: str
    n: int = 0


def _key(i: Acct) -> str:
    return f"{i.account}:{i.n}"


@pytest.fixture
def clock() -> Iterator[FrozenClock]:
    c = FrozenClock()
    with use_clock(c):
        yield c


@pytest.fixture
def driver(engine: Engine) -> EngineDriver:
    """The memory driver, then Postgres (its lease store in SQL): installed as JOB_DRIVER."""
    return engine.driver


@pytest.fixture
def memory(clock: FrozenClock) -> Iterator[JobDriver]:
    """The memory driver alone, for the tests that drive its frozen clock."""
    d = memory_job_driver()
    with swap_adapter(JOB_DRIVER, d):
        yield d


class Gate:
    """A body that holds its slot until released, recording who got in."""

    def __init__(self) -> None:
        self.entered: list[int] = []
        self.go = asyncio.Event()
        self.inside = asyncio.Event()

    async def body(self, input: Acct, step: Any, ctx: Any) -> str:
        self.entered.append(input.n)
        self.inside.set()
        await self.go.wait()
        return "ok"


async def claim(
    driver: JobDriver, queue: str = "default", n: int = 1, vt: int = 30_000
) -> list[ClaimedJob]:
    return await driver.claim(queues=[queue], limit=n, worker_id="w1", visibility_timeout_ms=vt)


async def show(driver: JobDriver, job_id: str) -> Any:
    intro = driver.introspect  # type: ignore[attr-defined]
    return await intro.show(job_id)


def leases(driver: JobDriver) -> Any:
    return driver.leases  # type: ignore[attr-defined]


# --- the lease key and the cap ------------------------------------------------------------------


async def test_a_plain_cap_holds_job_name_and_waits_without_burning_an_attempt(
    driver: JobDriver,
) -> None:
    gate = Gate()
    capped: Job[Any, Any] = job(
        input=Acct, idempotency_key=_key, name="capped", concurrency=1, run=gate.body
    )
    first = await capped.enqueue({"account": "a", "n": 1})
    second = await capped.enqueue({"account": "b", "n": 2})
    [c1, c2] = await claim(driver, n=2)
    settings = ExecutionSettings(busy_delay_ms=250)
    run1 = asyncio.ensure_future(execute_job(c1, capped, driver=driver, settings=settings))
    await gate.inside.wait()
    assert [g.holder for g in await leases(driver).holders("job:capped")] == [first.id]

    out2 = await execute_job(c2, capped, driver=driver, settings=settings)
    assert (out2.outcome, out2.landed, out2.delay_ms) == ("release", True, 250)
    row2 = await show(driver, second.id)
    assert row2.state == "ready" and row2.attempts == 0  # no attempt burned
    assert row2.last_error is None
    assert gate.entered == [1]  # its body never ran

    gate.go.set()
    assert (await run1).outcome == "done"
    assert await leases(driver).holders("job:capped") == []  # released at the settle


async def test_a_keyed_fail_cap_refuses_over_a_busy_key_naming_the_holder_and_the_fix(
    driver: JobDriver,
) -> None:
    gate = Gate()
    sync: Job[Any, Any] = job(
        input=Acct,
        idempotency_key=_key,
        name="sync",
        concurrency=Concurrency(key=lambda i: i.account, limit=1, when_busy="fail"),
        run=gate.body,
    )
    holder = await sync.enqueue({"account": "acme", "n": 1})
    busy = await sync.enqueue({"account": "acme", "n": 2})
    other = await sync.enqueue({"account": "umbrella", "n": 3})
    [c1, c2, c3] = await claim(driver, n=3)
    run1 = asyncio.ensure_future(execute_job(c1, sync, driver=driver))
    await gate.inside.wait()
    assert [g.holder for g in await leases(driver).holders("job:sync:acme")] == [holder.id]

    refused = await execute_job(c2, sync, driver=driver)
    assert (refused.outcome, refused.landed) == ("failed", True)
    row = await show(driver, busy.id)
    assert row.state == "failed"  # not retried, not a dead letter
    assert row.last_error["code"] == "X_JOB_KEY_BUSY"
    assert "job:sync:acme" in row.last_error["message"]
    assert holder.id in row.last_error["message"]
    assert f"x jobs retry {busy.id}" in row.last_error["fix"]
    assert gate.entered == [1]

    run3 = asyncio.ensure_future(execute_job(c3, sync, driver=driver))  # another key: runs
    gate.go.set()
    assert [(await run1).outcome, (await run3).outcome] == ["done", "done"]
    assert sorted(gate.entered) == [1, 3]
    assert (await show(driver, other.id)).state == "done"


async def test_a_run_is_never_refused_by_its_own_earlier_claim(driver: JobDriver) -> None:
    ran: list[int] = []

    async def body(input: Acct, step: Any, ctx: Any) -> None:
        ran.append(input.n)

    sync: Job[Any, Any] = job(
        input=Acct,
        idempotency_key=_key,
        name="own-slot",
        concurrency=Concurrency(key=lambda i: i.account, limit=1, when_busy="fail"),
        run=body,
    )
    mine = await sync.enqueue({"account": "acme", "n": 1})
    # its earlier claim (a crash, a sleep, a redelivery) left the slot held, not yet lapsed
    assert await leases(driver).acquire("job:own-slot:acme", limit=1, holder=mine.id, ttl_ms=60_000)
    [claimed] = await claim(driver)
    assert (await execute_job(claimed, sync, driver=driver)).outcome == "done"
    assert ran == [1]
    assert await leases(driver).holders("job:own-slot:acme") == []


async def test_the_slot_is_taken_before_the_body_and_released_after_every_landed_settle(
    driver: EngineDriver,
) -> None:
    seen: list[list[str]] = []

    async def body(input: Acct, step: Any, ctx: Any) -> None:
        seen.append([g.holder for g in await leases(driver).holders("job:flaky:a")])
        raise RuntimeError("boom")

    flaky: Job[Any, Any] = job(
        input=Acct,
        idempotency_key=_key,
        name="flaky",
        concurrency=Concurrency(key=lambda i: i.account, limit=2),
        retry=Retry(attempts=3),
        run=body,
    )
    r = await flaky.enqueue({"account": "a"})
    [claimed] = await claim(driver)
    outcome = await execute_job(claimed, flaky, driver=driver)
    assert outcome.outcome == "retry"
    assert seen == [[r.id]]
    assert await leases(driver).holders("job:flaky:a") == []  # a retry gives it back too


async def test_a_key_that_throws_at_claim_fails_the_attempt_on_the_retry_path_without_the_body(
    driver: EngineDriver,
) -> None:
    calls = {"n": 0}
    ran: list[int] = []

    def key(i: Acct) -> str:
        calls["n"] += 1
        if calls["n"] > 1:
            raise LookupError("the account vanished")
        return i.account

    async def body(input: Acct, step: Any, ctx: Any) -> None:
        ran.append(1)

    keyed: Job[Any, Any] = job(
        input=Acct,
        idempotency_key=_key,
        name="keyed-throws",
        concurrency=Concurrency(key=key, limit=1),
        retry=Retry(attempts=3, delay="1s", jitter="none"),
        run=body,
    )
    r = await keyed.enqueue({"account": "a"})  # the enqueue asks the key first: fine
    [claimed] = await claim(driver)
    outcome = await execute_job(claimed, keyed, driver=driver)
    assert (outcome.outcome, outcome.delay_ms) == ("retry", 1000)
    row = await show(driver, r.id)
    assert row.state == "ready" and row.attempts == 1
    assert "LookupError: the account vanished" in row.last_error["message"]
    assert ran == []


# memory only: the frozen clock pins the slot's expiry exactly (variant on Postgres below)
async def test_the_slot_ttl_is_the_visibility_timeout_renewed_with_the_heartbeat(
    memory: JobDriver, clock: FrozenClock
) -> None:
    gate = Gate()
    capped: Job[Any, Any] = job(
        input=Acct, idempotency_key=_key, name="renewed", concurrency=1, run=gate.body
    )
    await capped.enqueue({"account": "a"})
    [claimed] = await memory.claim(
        queues=["default"], limit=1, worker_id="w1", visibility_timeout_ms=30_000
    )
    settings = ExecutionSettings(visibility_timeout_ms=30_000, heartbeat_interval_ms=20)
    run = asyncio.ensure_future(execute_job(claimed, capped, driver=memory, settings=settings))
    await gate.inside.wait()
    [grant] = await leases(memory).holders("job:renewed")
    assert grant.expires_at_ms == clock.now_ms() + 30_000
    clock.advance("20s")
    for _ in range(100):
        await asyncio.sleep(0.01)
        [grant] = await leases(memory).holders("job:renewed")
        if grant.expires_at_ms == clock.now_ms() + 30_000:
            break
    assert grant.expires_at_ms == clock.now_ms() + 30_000  # renewed with the row's lease
    gate.go.set()
    assert (await run).outcome == "done"


async def test_on_postgres_the_slot_outlives_its_ttl_while_the_heartbeat_renews_it(
    pg_engine: Engine,
) -> None:
    driver = pg_engine.driver
    gate = Gate()
    capped: Job[Any, Any] = job(
        input=Acct, idempotency_key=_key, name="renewed", concurrency=1, run=gate.body
    )
    await capped.enqueue({"account": "a", "n": 1})
    other = await capped.enqueue({"account": "b", "n": 2})
    [claimed] = await claim(driver, vt=300)
    settings = ExecutionSettings(visibility_timeout_ms=300, busy_delay_ms=50)
    run = asyncio.ensure_future(execute_job(claimed, capped, driver=driver, settings=settings))
    await gate.inside.wait()
    [first] = await leases(driver).holders("job:renewed")
    assert first.holder == claimed.id
    assert first.expires_at_ms - await driver.now_ms() <= 300  # the TTL is the window
    await asyncio.sleep(0.8)  # more than two TTLs: held only because it is renewed
    [later] = await leases(driver).holders("job:renewed")
    assert (later.holder, later.slot) == (claimed.id, first.slot)
    assert later.expires_at_ms > first.expires_at_ms + 400
    [second] = await claim(driver)  # the other run meets the live slot: handed back, unburnt
    busy = await execute_job(second, capped, driver=driver, settings=settings)
    assert (busy.outcome, busy.landed) == ("release", True) and gate.entered == [1]
    assert (await show(driver, other.id)).attempts == 0
    gate.go.set()
    assert (await run).outcome == "done"
    assert await leases(driver).holders("job:renewed") == []


async def test_a_refused_slot_renewal_aborts_the_signal_with_x_job_slot_lost(
    driver: EngineDriver,
) -> None:
    reasons: list[str] = []
    inside = asyncio.Event()

    async def body(input: Acct, step: Any, ctx: Any) -> None:
        signal: Signal = ctx.signal
        inside.set()
        reason = await signal.wait()
        reasons.append(reason.code)
        raise reason

    capped: Job[Any, Any] = job(
        input=Acct, idempotency_key=_key, name="slot-lost", concurrency=1, run=body
    )
    r = await capped.enqueue({"account": "a"})
    [claimed] = await claim(driver)
    settings = ExecutionSettings(heartbeat_interval_ms=20, busy_delay_ms=250)
    with capture_log_events() as events:
        run = asyncio.ensure_future(execute_job(claimed, capped, driver=driver, settings=settings))
        await inside.wait()
        [grant] = await leases(driver).holders("job:slot-lost")
        # another run took the slot (its TTL passed while this worker's renewals failed)
        assert await leases(driver).release("job:slot-lost", grant.slot, holder=r.id)
        assert await leases(driver).acquire("job:slot-lost", limit=1, holder="x", ttl_ms=60_000)
        outcome = await run
    assert reasons == ["X_JOB_SLOT_LOST"]
    assert (outcome.outcome, outcome.delay_ms) == ("release", 250)  # handed back, uncounted
    row = await show(driver, r.id)
    assert row.state == "ready" and row.attempts == 0
    assert row.last_error["code"] == "X_JOB_SLOT_LOST"
    assert any(e["event"] == "jobs.slot.lost" for e in events)
    # the other run's slot is untouched
    assert [g.holder for g in await leases(driver).holders("job:slot-lost")] == ["x"]


async def test_execute_job_on_a_driver_without_a_lease_store_refuses_before_the_body(
    driver: EngineDriver,
) -> None:
    class NoLeases:
        def __init__(self, inner: JobDriver) -> None:
            self._inner = inner
            self.leases = None

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    ran: list[int] = []

    async def body(input: Acct, step: Any, ctx: Any) -> None:
        ran.append(1)

    capped: Job[Any, Any] = job(
        input=Acct, idempotency_key=_key, name="nolease", concurrency=2, run=body
    )
    r = await capped.enqueue({"account": "a"})
    [claimed] = await claim(driver)
    outcome = await execute_job(claimed, capped, driver=NoLeases(driver))
    assert outcome.outcome == "dead" and ran == []
    row = await show(driver, r.id)
    assert row.last_error["code"] == "X_JOB_CONCURRENCY_UNENFORCEABLE"
    assert "nolease" in row.last_error["message"] and row.last_error["fix"]


async def test_the_worker_refusal_names_every_capped_job_and_a_fix(driver: EngineDriver) -> None:
    class NoLeases:
        leases = None

        def __getattr__(self, name: str) -> Any:
            return getattr(driver, name)

    async def body(input: Acct, step: Any, ctx: Any) -> None:
        return None

    a: Job[Any, Any] = job(input=Acct, idempotency_key=_key, name="a", concurrency=1, run=body)
    b: Job[Any, Any] = job(
        input=Acct,
        idempotency_key=_key,
        name="b",
        concurrency=Concurrency(key=lambda i: i.account),
        run=body,
    )
    free: Job[Any, Any] = job(input=Acct, idempotency_key=_key, name="free", run=body)
    w = job_worker(jobs=[a, b, free], driver=NoLeases(), handle_signals=False)
    with pytest.raises(XError) as exc:
        await w.start()
    assert exc.value.code == "X_JOB_CONCURRENCY_UNENFORCEABLE"
    assert exc.value.meta["jobs"] == ["a", "b"]
    assert "free" not in exc.value.message
    assert exc.value.fix and "LeaseStore" in exc.value.fix


# --- end to end through the harness --------------------------------------------------------------


async def test_a_cap_of_one_never_runs_two_bodies_at_once_and_every_run_completes(
    engine: Engine,
) -> None:
    inside = {"now": 0, "max": 0}

    async def body(input: Acct, step: Any, ctx: Any) -> int:
        inside["now"] += 1
        inside["max"] = max(inside["max"], inside["now"])
        await step.run("work", lambda s: input.n)
        await asyncio.sleep(0)
        inside["now"] -= 1
        return input.n

    one_at_a_time: Job[Any, Any] = job(
        input=Acct,
        idempotency_key=_key,
        name="one-at-a-time",
        concurrency=Concurrency(key=lambda i: i.account, limit=1),
        run=body,
    )
    h = engine.harness([one_at_a_time])
    ids = [(await h.enqueue(one_at_a_time, {"account": "a", "n": n})).id for n in range(5)]
    await h.drain()
    rows = [await h.trace(i) for i in ids]
    assert [r.state for r in rows] == ["done"] * 5
    assert [r.attempts for r in rows] == [1] * 5  # the waits burned no attempt
    assert inside["max"] == 1
    assert h.worker.stats().released >= 4


async def test_a_settle_that_did_not_land_keeps_the_slot_for_the_claim_that_owns_the_run(
    driver: EngineDriver,
) -> None:
    async def body(input: Acct, step: Any, ctx: Any) -> None:
        # an operator cancels the run under its feet: this claim's settle cannot land
        await driver.introspect.cancel(ctx.job_id, reason="stop")

    capped: Job[Any, Any] = job(
        input=Acct, idempotency_key=_key, name="unlanded", concurrency=1, run=body
    )
    r = await capped.enqueue({"account": "a"})
    [claimed] = await claim(driver)
    outcome = await execute_job(claimed, capped, driver=driver)
    assert (outcome.outcome, outcome.landed) == ("done", False)
    # not released by a claim that no longer owns the run: the TTL frees it
    assert [g.holder for g in await leases(driver).holders("job:unlanded")] == [r.id]


async def test_the_worker_defers_a_busy_run_by_one_poll(driver: EngineDriver) -> None:
    gate = Gate()
    capped: Job[Any, Any] = job(
        input=Acct, idempotency_key=_key, name="polled", concurrency=1, run=gate.body
    )
    await capped.enqueue({"account": "a", "n": 1})
    waiting = await capped.enqueue({"account": "b", "n": 2})
    w = job_worker(jobs=[capped], driver=driver, poll_interval_ms=400, handle_signals=False)
    before = await driver.now_ms()
    await w.run_pass()
    await gate.inside.wait()
    deadline = asyncio.get_running_loop().time() + 15  # a loaded machine: wait for the hand-back
    while not (
        (r := await show(driver, waiting.id)).state == "ready"
        and to_epoch_ms(r.run_at) >= before + 400
    ):
        assert asyncio.get_running_loop().time() < deadline, "the busy run was never handed back"
        await asyncio.sleep(0.005)
    row = await show(driver, waiting.id)
    assert row.state == "ready" and row.attempts == 0
    assert before + 400 <= to_epoch_ms(row.run_at) <= await driver.now_ms() + 400
    gate.go.set()
    await w.wait_idle()
    assert w.stats().released == 1 and w.stats().completed == 1
