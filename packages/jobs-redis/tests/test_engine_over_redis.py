"""The engine over Redis: ``job()`` handles enqueue onto it, ``job_worker`` runs steps, retries,
sleeps and concurrency caps on it, a run whose worker died mid-step is recovered, and an enqueue
made inside a transaction is staged in the outbox and moved onto Redis by the relay only once the
transaction commits."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pydantic import BaseModel

from ultimat3.core import XError, capture_log_events, swap_adapter, use_connection
from ultimat3.jobs import Retry, job, job_worker, outbox_relay, with_lock
from ultimat3.jobs.adapter import JOB_DRIVER, OUTBOX_STORE
from ultimat3.jobs.memory import MemoryTransaction, memory_outbox_store
from ultimat3.jobs_redis import RedisJobDriver, redis_job_driver

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


class N(BaseModel):
    n: int


@pytest.fixture
async def installed(driver: RedisJobDriver) -> AsyncIterator[RedisJobDriver]:
    with swap_adapter(JOB_DRIVER, driver):
        yield driver


async def until(what: str, ready: Callable[[], Any], *, seconds: float = 20) -> None:
    for _ in range(int(seconds * 50)):
        if await ready():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"waited {seconds}s for {what}")


async def states(driver: RedisJobDriver, name: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in await driver.introspect.list(name=name, limit=200):
        counts[row.state] = counts.get(row.state, 0) + 1
    return counts


async def test_a_worker_runs_steps_retries_and_sleeps_on_redis(installed: RedisJobDriver) -> None:
    calls: dict[str, int] = {}

    async def body(input: N, step: Any, ctx: Any) -> int:
        async def charge(signal: Any) -> int:
            calls[f"charge-{input.n}"] = calls.get(f"charge-{input.n}", 0) + 1
            return input.n * 10

        charged = await step.run("charge", charge)
        if input.n % 3 == 0 and ctx.attempt == 1:
            raise RuntimeError("flaky once")
        if input.n % 4 == 0:
            await step.sleep("150ms")
        return int(charged) + 1

    flow = job(
        input=N,
        idempotency_key=lambda i: f"flow:{i.n}",
        name="flow",
        retry=Retry(attempts=3, delay="50ms", max_delay="100ms"),
        run=body,
    )
    results = await flow.enqueue_many([{"n": n} for n in range(40)])
    worker = job_worker(jobs=[flow], poll_interval_ms=10, idle_poll_max_ms=50,
                        handle_signals=False)  # fmt: skip
    await worker.start()
    try:
        await until("40 runs done", lambda: _done(installed, "flow", 40))
    finally:
        await worker.stop()
    for result, n in zip(results, range(40), strict=True):
        row = await installed.introspect.show(result.id)
        assert row.result == n * 10 + 1
        assert row.steps["charge"].executions == 1
        assert row.attempts == (2 if n % 3 == 0 else 1)
    assert all(count == 1 for count in calls.values()) and len(calls) == 40
    totals = await installed.introspect.counter_totals(await installed.now_ms() - 60_000)
    assert (totals.done, totals.retried) == (40, 14)


async def _done(driver: RedisJobDriver, name: str, n: int) -> bool:
    return (await states(driver, name)).get("done", 0) == n


async def test_with_lock_excludes_across_processes_through_the_redis_lease_store(
    installed: RedisJobDriver,
) -> None:
    """Two drivers on one prefix stand for two processes: one holder at a time, fenced tokens."""
    other = redis_job_driver(REDIS_URL, prefix=installed.prefix)
    inside = 0
    peak = 0
    tokens: list[int] = []

    async def critical(grant: Any) -> None:
        nonlocal inside, peak
        inside += 1
        peak = max(peak, inside)
        tokens.append(grant.token)
        await asyncio.sleep(0.01)
        inside -= 1

    try:
        await asyncio.gather(
            *(
                with_lock(
                    "ledger",
                    critical,
                    ttl="5s",
                    wait="10s",
                    poll="5ms",
                    store=(installed if i % 2 else other).leases,
                )
                for i in range(10)
            )
        )
    finally:
        await other.close()
    assert peak == 1
    assert len(tokens) == 10 and tokens == sorted(tokens)
    assert await installed.leases.holders("ledger") == []


async def test_a_run_whose_worker_died_mid_step_is_recovered(installed: RedisJobDriver) -> None:
    calls: list[str] = []

    async def body(input: N, step: Any, ctx: Any) -> str:
        async def first(signal: Any) -> str:
            calls.append("first")
            return "one"

        async def second(signal: Any) -> str:
            calls.append("second")
            return "two"

        return f"{await step.run('first', first)}-{await step.run('second', second)}"

    flow = job(input=N, idempotency_key=lambda i: str(i.n), name="recovers", run=body)
    queued = await flow.enqueue({"n": 1})
    # A worker claims it, completes the first step, then is killed in the second: no settle,
    # no heartbeat; its lease lapses.
    (held,) = await installed.claim(
        queues=[flow.queue], limit=1, worker_id="killed", visibility_timeout_ms=200
    )
    assert await installed.steps.record(
        held.id, "first", state="completed", worker_id="killed", claim=held.claim, output="one"
    )
    worker = job_worker(jobs=[flow], poll_interval_ms=10, idle_poll_max_ms=50,
                        handle_signals=False)  # fmt: skip
    await worker.start()
    try:
        await until("the recovered run", lambda: _done(installed, "recovers", 1))
    finally:
        await worker.stop()
    row = await installed.introspect.show(queued.id)
    assert (row.result, row.attempts) == ("one-two", 2)
    assert calls == ["second"]
    assert not await installed.ack(held.id, worker_id="killed", claim=held.claim)


@job(input=N, idempotency_key=lambda i: f"notify:{i.n}", name="notify")
async def _notify(input: N, step: Any, ctx: Any) -> None:  # pragma: no cover - never run here
    return None


async def test_an_enqueue_inside_a_transaction_reaches_redis_only_through_the_outbox(
    installed: RedisJobDriver,
) -> None:
    store = memory_outbox_store()
    with swap_adapter(OUTBOX_STORE, store):
        # Rolled back: the job never existed, on Redis or in the outbox.

        async def handler() -> None:
            async with MemoryTransaction() as tx, use_connection(tx):
                await _notify.enqueue({"n": 1})
                raise RuntimeError("the business write failed")

        with pytest.raises(RuntimeError):
            await handler()
        assert await outbox_relay(store, installed) == 0
        assert await installed.stats() == []
        # Committed: staged while open (nothing on Redis), moved by the relay after the commit.
        async with MemoryTransaction() as tx, use_connection(tx):
            staged = await _notify.enqueue({"n": 2})
            many = await _notify.enqueue_many([{"n": 3}, {"n": 4}])
            assert await installed.stats() == []
        assert await installed.stats() == []
        assert await outbox_relay(store, installed) == 3
    for result in (staged, *many):
        row = await installed.introspect.show(result.id)
        assert (row.run_id, row.state) == (result.run_id, "ready")
    # A relay that crashed after publishing but before marking republishes: no second row.
    again = await installed.enqueue_many(
        [req for _, req in await _republished(staged.id, installed)]
    )
    assert all(r.deduped for r in again)
    assert (await installed.stats())[0].ready == 3


async def _republished(job_id: str, driver: RedisJobDriver) -> list[tuple[str, Any]]:
    from ultimat3.jobs.adapter import EnqueueRequest

    row = await driver.introspect.show(job_id)
    return [
        (
            "row-1",
            EnqueueRequest(
                id=row.id,
                run_id=row.run_id,
                name=row.name,
                queue=row.queue,
                payload={"n": 99},
                idempotency_key=row.idempotency_key + "-other",
                max_attempts=row.max_attempts,
            ),
        )
    ]


async def test_a_worker_rides_out_a_redis_restart(redis_server: Any) -> None:
    """While Redis is down the worker logs jobs.driver.unavailable and keeps polling; once it is
    back the worker picks up work again, with no restart of its own."""
    done: list[int] = []

    async def body(input: N, step: Any, ctx: Any) -> None:
        done.append(input.n)

    echo = job(input=N, idempotency_key=lambda i: str(i.n), name="echo", run=body)
    own = redis_job_driver(redis_server.url)
    w = job_worker(jobs=[echo], driver=own, poll_interval_ms=5, idle_poll_max_ms=20,
                   handle_signals=False)  # fmt: skip
    try:
        with swap_adapter(JOB_DRIVER, own), capture_log_events() as events:
            await w.start()
            await echo.enqueue({"n": 1})
            await until("the first run", _returns(lambda: done == [1]))
            await asyncio.to_thread(redis_server.kill)
            await until(
                "an unavailable log",
                _returns(lambda: any(e["event"] == "jobs.driver.unavailable" for e in events)),
            )
            with pytest.raises(XError) as caught:
                await echo.enqueue({"n": 2})
            assert caught.value.code == "X_DRIVER_UNAVAILABLE"
            await asyncio.to_thread(redis_server.start)
            await echo.enqueue({"n": 3})
            await until("the run after the restart", _returns(lambda: done == [1, 3]))
            await w.stop()
    finally:
        await own.close()


def _returns(check: Callable[[], bool]) -> Callable[[], Any]:
    async def ready() -> bool:
        return check()

    return ready
