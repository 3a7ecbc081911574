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
import typing

from ._compensation import UNWIND_MARGIN
from ._context import JobContext, JobLog
from ._cursor import job_cursor
from ._declare import Job, job
from ._events import MemoryEventBus, memory_event_bus, publish_event
from ._execute import execute_job
from ._limiter import ConcurrencyLimiter, concurrency_limiter
from ._lock import LockGrant, hold_lock, with_lock
from ._model import (
    ENQUEUE_CHUNK,
    MAX_BULK_ROWS,
    MAX_ENQUEUE_BATCH,
    MAX_JOB_PAGE,
    MAX_TASK_FIRES,
    EnqueueResult,
)
from ._observe import RunEvent, RunObserver
from ._on_settled import Settled, SettledOutcome
from ._outcome import ExecutionSettings, RunOutcome
from ._policy import Concurrency, Retry
from ._relay import outbox_relay
from ._scheduler import SchedulerStats, TaskScheduler, task_scheduler
from ._steps import Step
from ._task import MAX_CATCH_UP, CatchUp, Task, TaskOccurrence, next_task_run, task
from ._worker import JobWorker, WorkerStats, job_worker

if typing.TYPE_CHECKING:  # so mypy types the lazily loaded factories
    from .factories.export_rows import ExportPage as ExportPage
    from .factories.export_rows import export_rows as export_rows
    from .factories.import_rows import ImportBatch as ImportBatch
    from .factories.import_rows import ImportErrors as ImportErrors
    from .factories.import_rows import import_rows as import_rows

# name -> module under ultimat3.jobs.factories; filled as factories land (one module each)
_FACTORIES: dict[str, str] = {
    "import_rows": "import_rows",
    "ImportBatch": "import_rows",
    "ImportErrors": "import_rows",
    "export_rows": "export_rows",
    "ExportPage": "export_rows",
}


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
    "Retry",
    "RunEvent",
    "RunObserver",
    "RunOutcome",
    "SchedulerStats",
    "Settled",
    "SettledOutcome",
    "Step",
    "Task",
    "TaskOccurrence",
    "TaskScheduler",
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
    "task",
    "task_scheduler",
    "with_lock",
]
