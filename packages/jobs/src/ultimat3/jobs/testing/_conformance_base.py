"""The conformance suite's plumbing: a fresh driver per test, time that passes on any clock,
requests in a queue of the test's own, and observers that work on every driver (``stats``)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any, ClassVar, TypedDict

import pytest

from ultimat3.core import XError, new_id
from ultimat3.jobs.adapter import (
    BackfillLedger,
    ClaimedJob,
    EnqueueRequest,
    JobDriver,
    JobIntrospection,
    JobState,
    LeaseStore,
    driver_backfills,
    driver_introspect,
    driver_leases,
)

LONG_VT = 60_000
"""A visibility timeout no test outlives: the lease never lapses by accident."""


class Held(TypedDict):
    worker_id: str
    claim: str


def held_by(job: ClaimedJob) -> Held:
    """The fence of a claimed job, as keywords: ``ack(job.id, **held_by(job))``."""
    return {"worker_id": job.worker_id, "claim": job.claim}


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def refused(code: str, *needles: str) -> Refusal:
    return Refusal(code, needles)


class Refusal:
    """``async with refused('X_CODE', 'id'):`` — the block must raise that code, and the message
    must name every needle (the offending id, state, limit)."""

    def __init__(self, code: str, needles: tuple[str, ...]) -> None:
        self.code = code
        self.needles = needles

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> bool:
        if exc is None:
            pytest.fail(f"expected {self.code}, nothing was raised")
        if not isinstance(exc, XError):
            return False
        assert exc.code == self.code, f"expected {self.code}, got {exc.code}: {exc.message}"
        for needle in self.needles:
            assert needle in exc.message, f"{self.code} message {exc.message!r} omits {needle!r}"
        return True


class ConformanceBase:
    """What every conformance test stands on: the driver fixture, time, requests, observers."""

    supports_leases: ClassVar[bool] = True
    supports_introspect: ClassVar[bool] = True
    supports_backfills: ClassVar[bool] = True
    supports_workers: ClassVar[bool] = True
    supports_task_fires: ClassVar[bool] = True
    supports_queue_samples: ClassVar[bool] = True
    """``QueueSampler.sample_queues`` (the ``queue_depth`` / ``queue_demand`` gauges)."""
    visibility_timeout_ms: ClassVar[int] = 300
    """Short, so a real-clock driver waits little for a lease to lapse."""
    settle_margin_ms: ClassVar[int] = 250
    """Added to every wait for a lapse or a due time, for a real clock's jitter."""
    soon_ms: ClassVar[int] = 600
    """A window the suite first asserts has NOT passed (a backoff, a run time, a TTL), then waits
    out: long enough that a busy machine does not cross it between two calls."""

    # --- what a subclass provides ------------------------------------------------------------

    async def make_driver(self) -> JobDriver:
        """A driver over an empty store. Called once per test."""
        raise NotImplementedError("subclass JobDriverConformance and implement make_driver()")

    async def advance_clock(self, ms: int) -> bool:
        """Move the driver's clock by ``ms`` and answer ``True``, when it can be moved. The
        default answers ``False`` and the suite sleeps instead."""
        return False

    # --- plumbing ----------------------------------------------------------------------------

    @pytest.fixture
    async def driver(self) -> AsyncIterator[JobDriver]:
        made = await self.make_driver()
        try:
            yield made
        finally:
            await made.close()

    async def elapse(self, ms: int) -> None:
        """Let ``ms`` pass on the driver's clock."""
        if not await self.advance_clock(ms):
            await asyncio.sleep(ms / 1000)

    async def lapse(self) -> None:
        """Wait until a lease taken with ``visibility_timeout_ms`` has lapsed."""
        await self.elapse(self.visibility_timeout_ms + self.settle_margin_ms)

    def req(
        self,
        queue: str,
        *,
        name: str = "conformance.job",
        key: str | None = None,
        payload: Any = None,
        tenant_id: str | None = None,
        max_attempts: int = 3,
        delay_ms: int | None = None,
        run_at_ms: int | None = None,
        concurrency_key: str | None = None,
        job_id: str | None = None,
    ) -> EnqueueRequest:
        return EnqueueRequest(
            id=job_id or new_id(),
            run_id=new_id(),
            name=name,
            queue=queue,
            payload={"n": 1} if payload is None else payload,
            idempotency_key=key or uniq("key"),
            max_attempts=max_attempts,
            tenant_id=tenant_id,
            concurrency_key=concurrency_key,
            delay_ms=delay_ms,
            run_at_ms=run_at_ms,
        )

    async def claim(
        self,
        driver: JobDriver,
        *queues: str,
        limit: int = 10,
        worker: str = "worker-1",
        vt: int = LONG_VT,
        no_dead_letter: tuple[str, ...] = (),
    ) -> list[ClaimedJob]:
        return await driver.claim(
            queues=list(queues),
            limit=limit,
            worker_id=worker,
            visibility_timeout_ms=vt,
            no_dead_letter=no_dead_letter,
        )

    async def claim_one(self, driver: JobDriver, queue: str, **kw: Any) -> ClaimedJob:
        got = await self.claim(driver, queue, limit=1, **kw)
        assert len(got) == 1, f"expected one due job in {queue}, claim answered {got}"
        return got[0]

    async def counts(self, driver: JobDriver, queue: str) -> dict[str, int]:
        """The queue's non-zero state counts, read off ``stats()`` (every driver has it)."""
        for row in await driver.stats():
            if row.queue == queue:
                return {
                    s: getattr(row, s)
                    for s in (
                        "ready",
                        "delayed",
                        "running",
                        "suspended",
                        "done",
                        "failed",
                        "dead",
                        "cancelled",
                    )
                    if getattr(row, s)
                }
        return {}

    def introspect(self, driver: JobDriver) -> JobIntrospection | None:
        found = driver_introspect(driver)
        if not self.supports_introspect:
            assert found is None, "supports_introspect = False, yet the driver has introspect"
            return None
        assert isinstance(found, JobIntrospection), "the driver's introspect lacks members"
        return found

    def leases(self, driver: JobDriver) -> LeaseStore | None:
        found = driver_leases(driver)
        if not self.supports_leases:
            assert getattr(driver, "leases", None) is None, (
                "supports_leases = False, yet it has one"
            )
            return None
        assert found is not None, "the driver's leases is missing or lacks LeaseStore members"
        return found

    def backfills(self, driver: JobDriver) -> BackfillLedger | None:
        found = driver_backfills(driver)
        if not self.supports_backfills:
            assert found is None, "supports_backfills = False, yet the driver has a ledger"
            return None
        assert isinstance(found, BackfillLedger), "the driver's backfills lacks members"
        return found

    async def state(self, intro: JobIntrospection, job_id: str) -> JobState:
        return (await intro.show(job_id)).state

    async def dead_rows(self, driver: JobDriver, queue: str, n: int, **kw: Any) -> list[str]:
        """``n`` dead jobs in ``queue`` (enqueued in one batch, claimed, nacked dead)."""
        reqs = [self.req(queue, **kw) for _ in range(n)]
        await driver.enqueue_many(reqs)
        jobs = await self.claim(driver, queue, limit=n)
        assert len(jobs) == n
        for job in jobs:
            assert await driver.nack(
                job.id, worker_id=job.worker_id, claim=job.claim, outcome="dead"
            )
        return [r.id for r in reqs]
