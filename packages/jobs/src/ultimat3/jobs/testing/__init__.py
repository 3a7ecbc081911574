"""Test doubles and proofs that ship with ultimat3-jobs: the job harness (memory driver + frozen
clock), ``crash_proof`` (a crash at every step boundary) and ``simulate_jobs`` (seeded
interleavings of many workers), the driver conformance suite and hypothesis strategies for the
port's values.

The harness needs nothing beyond ultimat3-jobs. ``JobDriverConformance`` needs pytest and the
strategies need hypothesis (``pip install "ultimat3-jobs[testing]"``): both are imported only when
first used, so ``from ultimat3.jobs.testing import job_harness`` works without them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ultimat3.jobs.testing._crash import CrashReport, crash_proof
from ultimat3.jobs.testing._harness import JobHarness, JobTrace, job_harness
from ultimat3.jobs.testing._simulate import SimRun, SimState, SimulationReport, simulate_jobs

if TYPE_CHECKING:
    from ultimat3.jobs.testing._conformance import JobDriverConformance
    from ultimat3.jobs.testing._strategies import (
        enqueue_batches,
        enqueue_requests,
        idempotency_keys,
        job_ids,
        job_names,
        json_values,
        queue_names,
        tenant_ids,
    )

_LAZY = {
    "JobDriverConformance": "._conformance",
    "enqueue_batches": "._strategies",
    "enqueue_requests": "._strategies",
    "idempotency_keys": "._strategies",
    "job_ids": "._strategies",
    "job_names": "._strategies",
    "json_values": "._strategies",
    "queue_names": "._strategies",
    "tenant_ids": "._strategies",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "CrashReport",
    "JobDriverConformance",
    "JobHarness",
    "JobTrace",
    "SimRun",
    "SimState",
    "SimulationReport",
    "crash_proof",
    "enqueue_batches",
    "enqueue_requests",
    "idempotency_keys",
    "job_harness",
    "job_ids",
    "job_names",
    "json_values",
    "queue_names",
    "simulate_jobs",
    "tenant_ids",
]
