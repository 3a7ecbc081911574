"""Crash accounting at the worker (issue 23), on memory and Postgres (``engine``): a job with a
crash on record runs alone; a job whose isolated runs crashed its process ``max_crashes`` times
is dead with ``X_JOB_CRASHED`` without its body running; each claim that follows a crash is one
point on ``job_crashes_total`` and a ``jobs.job.crashed`` event. The crashes are made by hand:
a worker that registered, claimed and then never beat again (a dead process)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from pydantic import BaseModel

from ultimat3.core import XError, capture_log_events, swap_adapter
from ultimat3.jobs import MAX_CRASHES_CEILING, Retry, job, job_worker
from ultimat3.jobs._run import crashes as _crashes
from ultimat3.jobs.adapter import JOB_DRIVER, driver_introspect
from ultimat3_testkit.engine_drivers import Engine

VT = 200


class Item(BaseModel):
    n: int


async def _pass_time(engine: Engine, ms: int) -> None:
    if engine.clock is not None:
        engine.clock.advance(ms)
    else:
        await asyncio.sleep(ms / 1000)


async def _crash(engine: Engine, queue: str, times: int) -> None:
    """``times`` workers, each registering, claiming everything due and dying with it."""
    for i in range(times):
        worker = f"dies-{queue}-{i}"
        await engine.driver.register_worker(
            worker, host="h", queues=[queue], slots=8, visibility_timeout_ms=VT
        )
        got = await engine.driver.claim(
            queues=[queue], limit=50, worker_id=worker, visibility_timeout_ms=VT
        )
        assert got, "something to die with"
        await _pass_time(engine, VT + 150)


def test_max_crashes_is_refused_outside_its_bounds() -> None:
    async def body(i: Item, step: Any, ctx: Any) -> None:
        return None

    bads: tuple[Any, ...] = (0, -1, True, 1.5, MAX_CRASHES_CEILING + 1)
    for bad in bads:
        with pytest.raises(XError) as caught:
            job(input=Item, idempotency_key=lambda i: str(i.n), max_crashes=bad, run=body)
        assert caught.value.code == "X_JOB_DECLARATION_INVALID"
        assert "max_crashes" in caught.value.message
    assert job(input=Item, idempotency_key=str, max_crashes=1, run=body).max_crashes == 1


async def test_a_crashed_job_runs_alone_and_the_others_are_not_charged(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    monkeypatch.setattr(_crashes, "meter", lambda: provider.get_meter("ultimat3"))
    monkeypatch.setattr(_crashes, "_crashes_counter", None)
    running: set[int] = set()
    alone: dict[int, set[int]] = {}

    async def body(i: Item, step: Any, ctx: Any) -> int:
        alone[i.n] = set(running)
        running.add(i.n)
        try:
            await asyncio.sleep(0.02)
        finally:
            running.discard(i.n)
        return i.n

    q = f"iso-{engine.kind}"
    work = job(
        input=Item, idempotency_key=lambda i: f"iso:{i.n}", name="iso.work", queue=q, run=body
    )
    with swap_adapter(JOB_DRIVER, engine.driver):
        crashed = await work.enqueue({"n": 0})
        await _crash(engine, q, 1)
        for n in range(1, 6):
            await work.enqueue({"n": n})
    worker = job_worker(jobs=[work], driver=engine.driver, max_in_flight=8, handle_signals=False)
    intro = driver_introspect(engine.driver)
    assert intro is not None
    with capture_log_events() as events:
        for _ in range(40):
            await worker.run_pass()
            await worker.wait_idle()
            await asyncio.sleep(0.02)  # a hand-back lands
            page = await intro.list(queue=q)
            if len(page) == 6 and all(r.state == "done" for r in page):
                break
    rows = {r.id: r for r in await intro.list(queue=q)}
    assert {r.state for r in rows.values()} == {"done"}
    assert {r.attempts for r in rows.values()} == {1}, "a crash is not an attempt"
    assert rows[crashed.id].crashes == 1
    assert alone[0] == set(), f"the crashed job ran beside {alone[0]}"
    crash_events = [e for e in events if e["event"] == "jobs.job.crashed"]
    assert [e["job_id"] for e in crash_events] == [crashed.id]
    assert crash_events[0]["level"] == "error"
    assert crash_events[0]["dead_worker"] == f"dies-{q}-0"
    data = reader.get_metrics_data()
    assert data is not None
    points = [
        (dict(p.attributes or {}), p.value)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "job_crashes_total"
        for p in m.data.data_points
        if isinstance(p, NumberDataPoint)
    ]
    assert points == [({"job": "iso.work", "queue": q}, 1)]
    provider.shutdown()


async def test_past_max_crashes_the_job_is_dead_x_job_crashed_its_body_not_run(
    engine: Engine,
) -> None:
    ran: list[int] = []
    told: list[Any] = []

    async def body(i: Item, step: Any, ctx: Any) -> None:
        ran.append(i.n)

    async def settled(s: Any) -> None:
        told.append(s)

    q = f"dead-{engine.kind}"
    poison = job(
        input=Item,
        idempotency_key=lambda i: f"p:{i.n}",
        name="crash.poison",
        queue=q,
        retry=Retry(attempts=3),
        max_crashes=2,
        on_settled=settled,
        run=body,
    )
    with swap_adapter(JOB_DRIVER, engine.driver):
        done = await poison.enqueue({"n": 1})
    # the first crash (not isolated), then two isolated ones: max_crashes=2 reached
    await _crash(engine, q, 3)
    worker = job_worker(jobs=[poison], driver=engine.driver, max_in_flight=4, handle_signals=False)
    assert await worker.run_pass() == 1
    await worker.wait_idle()
    assert ran == [], "the body of a job that kills its process is not run again"
    intro = driver_introspect(engine.driver)
    assert intro is not None
    row = await intro.show(done.id)
    assert (row.state, row.attempts, row.crashes) == ("dead", 1, 3)
    assert row.last_error is not None and row.last_error["code"] == "X_JOB_CRASHED"
    message = row.last_error["message"]
    assert "the worker process died while running it 3 times" in message
    assert "max_crashes=2" in message and "event loop" not in message
    assert worker.stats().dead_lettered == 1
    assert [s.outcome for s in told] == ["dead-lettered"]
