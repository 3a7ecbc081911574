"""A job whose worker dies on every attempt is dead-lettered by the next claim, and the worker
that claimed tells its ``on_settled`` (``dead-lettered``, ``dropped`` for ``dead_letter=False``)
and counts it — on the memory driver and on Postgres (``engine``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ultimat3.core import new_id
from ultimat3.jobs import Job, Retry, Settled, job
from ultimat3.jobs.adapter import EnqueueRequest, ExhaustionReporter
from ultimat3_testkit.engine_drivers import Engine

VT_MS = 300
"""The visibility timeout of the claims that "die": short, so Postgres waits it out for real."""


class Sync(BaseModel):
    org_id: str


def declare(name: str, seen: list[Settled[Any, Any]], **over: Any) -> Job[Any, Any]:
    async def body(input: Sync, step: Any, ctx: Any) -> None:
        raise AssertionError("a buried row is never handed out")

    def hook(settled: Settled[Any, Any]) -> None:
        seen.append(settled)

    declared: Job[Any, Any] = job(
        name=name,
        input=Sync,
        idempotency_key=lambda i: f"sync:{i.org_id}",
        tenant=lambda i: i.org_id,
        on_settled=hook,
        run=body,
        **over,
    )
    return declared


async def die_on_every_attempt(engine: Engine, j: Job[Any, Any], payload: Any) -> str:
    """Enqueue ``j`` and claim it on every attempt under a short lease that is never settled."""
    driver = engine.driver
    job_id = new_id()
    await driver.enqueue(
        EnqueueRequest(
            id=job_id,
            run_id=new_id(),
            name=j.name,
            queue="default",
            payload=payload,
            idempotency_key=new_id(),
            max_attempts=j.retry.attempts,
            tenant_id="o1",
        )
    )
    for attempt in range(1, j.retry.attempts + 1):
        [claimed] = await driver.claim(
            queues=["default"], limit=1, worker_id="dies", visibility_timeout_ms=VT_MS
        )
        assert (claimed.id, claimed.attempt) == (job_id, attempt)
        await engine.advance(f"{VT_MS}ms")
    return job_id


async def test_the_next_claim_buries_it_and_on_settled_hears_dead_lettered_once(
    engine: Engine,
) -> None:
    assert isinstance(engine.driver, ExhaustionReporter)
    seen: list[Settled[Any, Any]] = []
    j = declare("dies-every-time", seen, retry=Retry(attempts=2, delay=0))
    h = engine.harness([j])
    job_id = await die_on_every_attempt(engine, j, {"org_id": "o1"})
    await h.drain()
    await h.drain()
    [s] = seen
    assert (s.outcome, s.job, s.job_id, s.attempt, s.tenant_id) == (
        "dead-lettered",
        j.name,
        job_id,
        2,
        "o1",
    )
    assert s.code == "X_JOB_LEASE_LOST" and s.error is not None
    assert isinstance(s.input, Sync) and s.input.org_id == "o1"
    row = await engine.driver.introspect.show(job_id)
    assert row.state == "dead" and s.error == row.last_error
    stats = h.worker.stats()
    assert (stats.dead_lettered, stats.claimed) == (1, 0)
    assert engine.driver.take_exhausted() == []


async def test_a_dead_letter_false_job_is_buried_failed_and_told_dropped(engine: Engine) -> None:
    seen: list[Settled[Any, Any]] = []
    j = declare("dropped-every-time", seen, retry=Retry(attempts=1, dead_letter=False))
    h = engine.harness([j])
    job_id = await die_on_every_attempt(engine, j, {"no": "org"})
    await h.drain()
    [s] = seen
    assert (s.outcome, s.job_id, s.code, s.input) == ("dropped", job_id, "X_JOB_LEASE_LOST", None)
    assert (await engine.driver.introspect.show(job_id)).state == "failed"
    stats = h.worker.stats()
    assert (stats.failed, stats.dead_lettered) == (1, 0)


async def test_a_job_the_worker_does_not_declare_is_neither_told_nor_counted(
    engine: Engine,
) -> None:
    seen: list[Settled[Any, Any]] = []
    j = declare("someone-elses", seen, retry=Retry(attempts=1))
    other = declare("mine", seen)
    h = engine.harness([other])
    job_id = await die_on_every_attempt(engine, j, {"org_id": "o1"})
    await h.drain()
    assert seen == []
    assert (await engine.driver.introspect.show(job_id)).state == "dead"
    assert h.worker.stats().dead_lettered == 0
