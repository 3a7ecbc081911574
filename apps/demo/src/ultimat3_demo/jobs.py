"""The jobs of ``x demo``: a small shop's background work, with the failures a real one meets.

- ``send_receipt``: one short job per paid order (the bulk).
- ``fulfil_order``: three durable steps (reserve stock, charge the card, ship). For every
  ``FLAKY_EVERY``-th order the payment gateway times out once: the attempt fails, the retry
  replays ``reserve-stock`` from storage (its function is not called again) and charges again.
- ``trial_reminder``: starts a trial, ``step.sleep('2s')``, then sends the reminder. It is
  enqueued twice with the same key: the second enqueue dedupes onto the first.
- ``export_ledger``: renders, then uploads to a bucket that refuses writes until the demo fixes
  it. Both attempts fail, so it dead-letters; the demo fixes the bucket and replays it with
  ``introspect.requeue(id)``, which resumes at ``upload``: ``render`` is not run again.

Every body reaches the demo's :class:`DemoWorld` as ``ctx.app``: the fake services, and what
the demo measures (when each body first started, how many times each step's function ran).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import BaseModel

from ultimat3.core import Signal
from ultimat3.jobs import Job, JobContext, Retry, Step, job

FLAKY_EVERY: Final = 25
"""Every 25th order's card charge fails once (a gateway timeout), then succeeds."""
SLEEP: Final = "2s"
SLEEP_MS: Final = 2000
BUCKET: Final = "x-demo-exports"


@dataclass(slots=True)
class DemoWorld:
    """The fake services the demo's jobs call, and what the demo measures from inside them.
    Times are ``time.perf_counter()`` seconds (one process: the producer's clock)."""

    io_s: float = 0.001
    """The simulated latency of a vendor call (mail, payment, storage)."""
    bucket_ready: bool = False
    started: dict[str, float] = field(default_factory=dict)
    """A job's first body start (its pickup), by job id."""
    finished: dict[str, float] = field(default_factory=dict)
    """When a job's body last returned, by job id."""
    executions: Counter[tuple[str, str]] = field(default_factory=Counter)
    """``(job id, step)`` -> how many times the step's function ran."""
    gateway_timeouts: set[str] = field(default_factory=set)
    """Orders whose charge already failed once."""
    sleep_began: dict[str, float] = field(default_factory=dict)
    woke: dict[str, float] = field(default_factory=dict)
    sent: Counter[str] = field(default_factory=Counter)
    a_job_started: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a body starts: the producer waits on it while its backlog is full."""
    a_job_ended: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a body returns: the pickup probes wait on it for the bulk to end."""

    def begin(self, ctx: JobContext) -> None:
        if ctx.job_id not in self.started:
            self.started[ctx.job_id] = time.perf_counter()
            self.a_job_started.set()

    def end(self, ctx: JobContext) -> None:
        self.finished[ctx.job_id] = time.perf_counter()
        self.a_job_ended.set()

    async def vendor_call(self, ctx: JobContext, step: str) -> None:
        """One call to a vendor: counted, and as slow as ``io_s``."""
        self.executions[(ctx.job_id, step)] += 1
        if self.io_s > 0:
            await asyncio.sleep(self.io_s)


def world_of(ctx: JobContext) -> DemoWorld:
    app: Any = ctx.app
    if not isinstance(app, DemoWorld):
        raise TypeError(f"the demo's jobs run with a DemoWorld as app, not {app!r}")
    return app


# --- send_receipt -------------------------------------------------------------------------


class Receipt(BaseModel):
    order_id: str
    email: str
    total_cents: int


@job(input=Receipt, queue="emails", idempotency_key=lambda r: f"receipt:{r.order_id}")
async def send_receipt(input: Receipt, step: Step, ctx: JobContext) -> dict[str, Any]:
    world = world_of(ctx)
    world.begin(ctx)
    await world.vendor_call(ctx, "mail")
    world.sent["receipt"] += 1
    world.end(ctx)
    return {"to": input.email, "total_cents": input.total_cents}


# --- fulfil_order -------------------------------------------------------------------------


class Order(BaseModel):
    order_id: str
    sku: str
    quantity: int
    flaky: bool = False


@job(
    input=Order,
    queue="orders",
    idempotency_key=lambda o: f"fulfil:{o.order_id}",
    retry=Retry(attempts=3, backoff="exponential", delay="200ms"),
)
async def fulfil_order(input: Order, step: Step, ctx: JobContext) -> dict[str, Any]:
    world = world_of(ctx)
    world.begin(ctx)

    async def reserve(signal: Signal) -> dict[str, Any]:
        await world.vendor_call(ctx, "reserve-stock")
        return {"sku": input.sku, "reserved": input.quantity}

    async def charge(signal: Signal) -> dict[str, Any]:
        await world.vendor_call(ctx, "charge-card")
        if input.flaky and input.order_id not in world.gateway_timeouts:
            world.gateway_timeouts.add(input.order_id)
            raise TimeoutError(f"payment gateway timed out charging order {input.order_id}")
        return {"charge_id": f"ch_{input.order_id}"}

    async def ship(signal: Signal) -> dict[str, Any]:
        await world.vendor_call(ctx, "ship")
        return {"tracking": f"trk_{input.order_id}"}

    stock = await step.run("reserve-stock", reserve)
    charge_out = await step.run("charge-card", charge)
    shipment = await step.run("ship", ship)
    world.end(ctx)
    return {"stock": stock, "charge": charge_out, "shipment": shipment}


# --- trial_reminder (the sleep, and the dedupe) -------------------------------------------


class Trial(BaseModel):
    account_id: str


@job(input=Trial, queue="emails", idempotency_key=lambda t: f"trial:{t.account_id}")
async def trial_reminder(input: Trial, step: Step, ctx: JobContext) -> dict[str, Any]:
    world = world_of(ctx)
    world.begin(ctx)

    async def start_trial(signal: Signal) -> str:
        await world.vendor_call(ctx, "start-trial")
        return "trial started"

    async def remind(signal: Signal) -> str:
        world.woke.setdefault(ctx.job_id, time.perf_counter())
        await world.vendor_call(ctx, "send-reminder")
        return "reminder sent"

    await step.run("start-trial", start_trial)
    world.sleep_began.setdefault(ctx.job_id, time.perf_counter())
    await step.sleep(SLEEP)
    sent = await step.run("send-reminder", remind)
    world.end(ctx)
    return {"account_id": input.account_id, "reminder": sent}


# --- export_ledger (the dead letter, replayed) --------------------------------------------


class Export(BaseModel):
    month: str


@job(
    input=Export,
    queue="reports",
    idempotency_key=lambda e: f"export:{e.month}",
    retry=Retry(attempts=2, backoff="fixed", delay="100ms"),
)
async def export_ledger(input: Export, step: Step, ctx: JobContext) -> dict[str, Any]:
    world = world_of(ctx)
    world.begin(ctx)

    async def render(signal: Signal) -> dict[str, Any]:
        await world.vendor_call(ctx, "render")
        return {"file": f"ledger-{input.month}.csv", "rows": 1200}

    async def upload(signal: Signal) -> str:
        await world.vendor_call(ctx, "upload")
        if not world.bucket_ready:
            raise PermissionError(f"bucket {BUCKET} refuses writes: the role lacks s3:PutObject")
        return f"s3://{BUCKET}/ledger-{input.month}.csv"

    report = await step.run("render", render)
    where = await step.run("upload", upload)
    world.end(ctx)
    return {"report": report, "uploaded_to": where}


DEMO_JOBS: Final[tuple[Job[Any, Any], ...]] = (
    send_receipt,
    fulfil_order,
    trial_reminder,
    export_ledger,
)
