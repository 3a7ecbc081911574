"""Typing examples for ultimat3.jobs (checked by mypy --strict in CI, with warn_unused_ignores:
every ``# type: ignore[...]`` below is itself the proof that the line is a type error)."""

from __future__ import annotations

from typing import Any, assert_type
from uuid import UUID, uuid4

from pydantic import BaseModel

from ultimat3.core import Actor, JsonValue, Signal
from ultimat3.jobs import (
    Concurrency,
    EnqueueResult,
    Job,
    JobContext,
    JobWorker,
    Retry,
    Step,
    WorkerStats,
    job,
    job_worker,
    publish_event,
)
from ultimat3.jobs.testing import JobHarness, JobTrace


class OnboardOrg(BaseModel):
    org_id: UUID


class Approved(BaseModel):
    order_id: str


async def provision(org_id: UUID) -> dict[str, str]:
    return {"id": str(org_id)}


# --- the canonical job, as a decorator -------------------------------------------------------


@job(
    input=OnboardOrg,
    tenant=lambda i: str(i.org_id),
    idempotency_key=lambda i: f"onboard:{i.org_id}",
    retry=Retry(attempts=5, backoff="exponential"),
)
async def onboard_org(input: OnboardOrg, step: Step, ctx: JobContext) -> int:
    org = await step.run("provision", lambda signal: provision(input.org_id))
    assert_type(org, JsonValue)
    await step.sleep("3d")
    approved = await step.wait_for_event("approval", "order.approved", schema=Approved)
    assert_type(approved, Approved | None)
    assert_type(ctx.signal, Signal)
    assert_type(ctx.final_attempt, bool)
    ctx.progress(1, 2)
    return ctx.attempt


assert_type(onboard_org, Job[OnboardOrg, int])
assert_type(onboard_org.retry, Retry)
assert_type(onboard_org.timeout_ms, int | None)
assert_type(onboard_org.describe(), dict[str, Any])


# --- the call form, with run= -------------------------------------------------------------------


async def sync_account(input: OnboardOrg, step: Step, ctx: JobContext) -> None:
    return None


synced = job(
    input=OnboardOrg,
    idempotency_key=lambda i: f"sync:{i.org_id}",
    concurrency=Concurrency(key=lambda i: str(i.org_id), limit=1, when_busy="fail"),
    queue="integrations",
    timeout="10m",
    run=sync_account,
)
assert_type(synced, Job[OnboardOrg, None])
assert_type(synced.concurrency_key_for({"org_id": str(uuid4())}), str | None)


# --- idempotency_key is required by the type -----------------------------------------------------

missing = job(input=OnboardOrg, run=sync_account)  # type: ignore[call-overload]


@job(input=OnboardOrg)  # type: ignore[call-overload, untyped-decorator]
async def missing_key(input: OnboardOrg, step: Step, ctx: JobContext) -> None:
    return None


# a key that reads a field the input does not have
wrong_field = job(
    input=OnboardOrg,
    idempotency_key=lambda i: i.account_id,  # type: ignore[attr-defined]
    run=sync_account,
)


class Other(BaseModel):
    n: int


# a body for another input
@job(input=OnboardOrg, idempotency_key=lambda i: str(i.org_id))  # type: ignore[arg-type]
async def mismatched(input: Other, step: Step, ctx: JobContext) -> None:
    return None


# --- the projections -----------------------------------------------------------------------------


async def projections(actor: Actor) -> None:
    one = await onboard_org.enqueue({"org_id": str(uuid4())}, delay="1h")
    assert_type(one, EnqueueResult)
    also = await onboard_org.enqueue(OnboardOrg(org_id=uuid4()), run_id=str(uuid4()))
    assert_type(also, EnqueueResult)
    many = await onboard_org.enqueue_many([{"org_id": str(uuid4())}])
    assert_type(many, list[EnqueueResult])
    mine = await onboard_org.enqueue_as(actor, {"org_id": str(uuid4())})
    assert_type(mine, EnqueueResult)
    parsed = onboard_org.parse({"org_id": str(uuid4())})
    assert_type(parsed, OnboardOrg)
    assert_type(onboard_org.idempotency_key_for(parsed), str)
    await onboard_org.enqueue_many({"org_id": "x"})  # type: ignore[arg-type]
    await publish_event("order.approved", {"order_id": "o1"})


async def running() -> None:
    worker = job_worker(jobs=[onboard_org, synced], max_in_flight=8)
    assert_type(worker, JobWorker)
    await worker.start()
    assert_type(worker.stats(), WorkerStats)
    await worker.stop()


async def testing() -> None:
    run_jobs = JobHarness(jobs=[onboard_org])
    trace = await run_jobs(onboard_org, {"org_id": str(uuid4())})
    assert_type(trace, JobTrace)
    assert_type(trace.steps["provision"].executions, int)
    run_jobs.clock.advance("3d")
    drained = await run_jobs.drain()
    assert_type(drained, JobTrace | None)
