"""Test doubles and proofs that ship with ultimat3-jobs: the driver conformance suite and
hypothesis strategies for the port's values. Needs the test tools (pytest, hypothesis)."""

from ._conformance import JobDriverConformance
from ._harness import JobHarness, JobTrace, job_harness
from ._strategies import (
    enqueue_batches,
    enqueue_requests,
    idempotency_keys,
    job_ids,
    job_names,
    json_values,
    queue_names,
    tenant_ids,
)

__all__ = [
    "JobDriverConformance",
    "JobHarness",
    "JobTrace",
    "enqueue_batches",
    "enqueue_requests",
    "idempotency_keys",
    "job_harness",
    "job_ids",
    "job_names",
    "json_values",
    "queue_names",
    "tenant_ids",
]
