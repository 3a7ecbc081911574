"""The observability surface: what its types promise (mypy --strict)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, assert_type

from pydantic import BaseModel

from ultimat3.jobs import JobWorker, job, job_worker
from ultimat3.jobs.adapter import (
    DEPTH_SAMPLE_CAP,
    ClaimedJob,
    EnqueueRequest,
    JobDriver,
    QueueSample,
    QueueSampler,
    memory_job_driver,
)


class Ping(BaseModel):
    n: int


@job(input=Ping, idempotency_key=lambda i: str(i.n))
async def ping(input: Ping, step: Any, ctx: Any) -> None:
    return None


worker = job_worker(jobs=[ping], depth_sample_interval_ms=15_000)
assert_type(worker, JobWorker)
cap: int = DEPTH_SAMPLE_CAP

sample = QueueSample(queue="default", depth=3, running=2, paused=False)
assert_type(sample.demand, int)


async def depth(driver: JobDriver) -> list[QueueSample] | None:
    if isinstance(driver, QueueSampler):
        return await driver.sample_queues(["default"])
    return None


def carried(request: EnqueueRequest, claimed: ClaimedJob) -> None:
    assert_type(request.trace_context, Mapping[str, str] | None)
    assert_type(claimed.trace_context, Mapping[str, str] | None)


sampler: QueueSampler = memory_job_driver()
