"""ultimat3.jobs: durable background jobs and workflows.

``job()`` declares a job; its handle enqueues (through the one ambient facade), ``job_worker()``
runs it (through ``execute_job``, the one execution path), and ``step.run`` / ``step.sleep`` /
``step.wait_for_event`` make it durable. Drivers and ports live in ``ultimat3.jobs.adapter``; the
test harness in ``ultimat3.jobs.testing``.

Factories (``webhook``, ``consumer``, ``backfill``, ...) are reachable as
``from ultimat3.jobs import webhook`` through the lazy module ``__getattr__`` below, so
``import ultimat3.jobs`` loads none of them.
"""

from __future__ import annotations

import importlib

from ultimat3.jobs._declare.job import Job, job
from ultimat3.jobs._declare.policy import UNWIND_MARGIN, Concurrency, Retry
from ultimat3.jobs._declare.task import (
    MAX_CATCH_UP,
    CatchUp,
    Task,
    TaskOccurrence,
    next_task_run,
    task,
)
from ultimat3.jobs._process.relay import outbox_relay
from ultimat3.jobs._process.relay_loop import RelayLoop, RelayStats, relay_loop
from ultimat3.jobs._process.run_jobs import RunningJobs, run_jobs
from ultimat3.jobs._process.scheduler import SchedulerStats, TaskScheduler, task_scheduler
from ultimat3.jobs._process.settings import WorkerSettings
from ultimat3.jobs._process.worker import JobWorker, WorkerStats, job_worker
from ultimat3.jobs._run.context import JobContext, JobLog
from ultimat3.jobs._run.events import publish_event
from ultimat3.jobs._run.execute import execute_job
from ultimat3.jobs._run.limiter import ConcurrencyLimiter, concurrency_limiter
from ultimat3.jobs._run.lock import LockGrant, hold_lock, with_lock
from ultimat3.jobs._run.observe import RunEvent, RunObserver
from ultimat3.jobs._run.on_settled import Settled, SettledOutcome
from ultimat3.jobs._run.outcome import ExecutionSettings, RunOutcome
from ultimat3.jobs._run.steps import Step
from ultimat3.jobs.adapter import (
    ENQUEUE_CHUNK,
    MAX_BULK_ROWS,
    MAX_ENQUEUE_BATCH,
    MAX_JOB_PAGE,
    MAX_TASK_FIRES,
    EnqueueResult,
    job_cursor,
)
from ultimat3.jobs.memory import MemoryEventBus, memory_event_bus

# name -> module under ultimat3.jobs.factories; filled as factories land (one module each)
_FACTORIES: dict[str, str] = {}


def __getattr__(name: str) -> object:
    """Load a factory on first use: ``from ultimat3.jobs import webhook``."""
    module = _FACTORIES.get(name)
    if module is None:
        raise AttributeError(f"module 'ultimat3.jobs' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"ultimat3.jobs.factories.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "ENQUEUE_CHUNK",
    "MAX_BULK_ROWS",
    "MAX_CATCH_UP",
    "MAX_ENQUEUE_BATCH",
    "MAX_JOB_PAGE",
    "MAX_TASK_FIRES",
    "UNWIND_MARGIN",
    "CatchUp",
    "Concurrency",
    "ConcurrencyLimiter",
    "EnqueueResult",
    "ExecutionSettings",
    "Job",
    "JobContext",
    "JobLog",
    "JobWorker",
    "LockGrant",
    "MemoryEventBus",
    "RelayLoop",
    "RelayStats",
    "Retry",
    "RunEvent",
    "RunObserver",
    "RunOutcome",
    "RunningJobs",
    "SchedulerStats",
    "Settled",
    "SettledOutcome",
    "Step",
    "Task",
    "TaskOccurrence",
    "TaskScheduler",
    "WorkerSettings",
    "WorkerStats",
    "concurrency_limiter",
    "execute_job",
    "hold_lock",
    "job",
    "job_cursor",
    "job_worker",
    "memory_event_bus",
    "next_task_run",
    "outbox_relay",
    "publish_event",
    "relay_loop",
    "run_jobs",
    "task",
    "task_scheduler",
    "with_lock",
]
