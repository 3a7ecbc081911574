"""The jobs adapter port: driver protocols, the values they speak, the memory driver, and the
ambient installation (``install_job_driver``; ``swap_adapter(JOB_DRIVER, d)`` in a test)."""

from __future__ import annotations

from ultimat3.core import Port, adapter, install_adapter, installed_adapter

from ._cursor import job_cursor, parse_job_cursor
from ._model import (
    ALL_STATES,
    COUNTER_TIERS,
    DEAD_RETENTION_MS,
    DEPTH_SAMPLE_CAP,
    DONE_RETENTION_MS,
    ENQUEUE_CHUNK,
    LIVE_STATES,
    MAX_BULK_ROWS,
    MAX_ENQUEUE_BATCH,
    MAX_JOB_PAGE,
    MAX_TASK_FIRES,
    PROMOTABLE_STATES,
    TERMINAL_STATES,
    BackfillRow,
    BulkResult,
    ClaimedJob,
    CounterRow,
    CounterTotals,
    EnqueueColumns,
    EnqueueRequest,
    EnqueueResult,
    ExhaustedJob,
    JobDetail,
    JobRow,
    JobState,
    LeaseGrant,
    NackOutcome,
    QueueSample,
    QueueStats,
    StepRecord,
    StepState,
    TaskFire,
    WorkerRow,
    to_json_dict,
)
from ._ports import (
    BackfillLedger,
    ColumnEnqueuer,
    EventBus,
    ExhaustionReporter,
    JobDriver,
    JobIntrospection,
    LeaseStore,
    OutboxStore,
    QueueSampler,
    StepStore,
    WorkerRegistry,
)
from .drivers.memory import MemoryJobDriver, memory_job_driver

JOB_DRIVER: Port[JobDriver] = Port(
    "jobs",
    fix="install_job_driver(memory_job_driver()) in a test, or "
    "install_job_driver(postgres_job_driver(DATABASE_URL)) at the app's edge",
)
EVENT_BUS: Port[EventBus] = Port(
    "jobs.event_bus",
    fix="install_adapter(EVENT_BUS, memory_event_bus(driver)) or the Postgres bus",
)
OUTBOX_STORE: Port[OutboxStore] = Port(
    "jobs.outbox",
    fix="install_adapter(OUTBOX_STORE, ...) with a store for the ambient connection's database",
)


def install_job_driver(driver: JobDriver) -> None:
    """Make ``driver`` the one every ``enqueue`` and worker resolves."""
    install_adapter(JOB_DRIVER, driver)


def job_driver() -> JobDriver:
    """The installed driver (``X_ADAPTER_MISSING`` with the fix when none is)."""
    return adapter(JOB_DRIVER)


def installed_job_driver() -> JobDriver | None:
    return installed_adapter(JOB_DRIVER)


__all__ = [
    "ALL_STATES",
    "COUNTER_TIERS",
    "DEAD_RETENTION_MS",
    "DEPTH_SAMPLE_CAP",
    "DONE_RETENTION_MS",
    "ENQUEUE_CHUNK",
    "EVENT_BUS",
    "JOB_DRIVER",
    "LIVE_STATES",
    "MAX_BULK_ROWS",
    "MAX_ENQUEUE_BATCH",
    "MAX_JOB_PAGE",
    "MAX_TASK_FIRES",
    "OUTBOX_STORE",
    "PROMOTABLE_STATES",
    "TERMINAL_STATES",
    "BackfillLedger",
    "BackfillRow",
    "BulkResult",
    "ClaimedJob",
    "ColumnEnqueuer",
    "CounterRow",
    "CounterTotals",
    "EnqueueColumns",
    "EnqueueRequest",
    "EnqueueResult",
    "EventBus",
    "ExhaustedJob",
    "ExhaustionReporter",
    "JobDetail",
    "JobDriver",
    "JobIntrospection",
    "JobRow",
    "JobState",
    "LeaseGrant",
    "LeaseStore",
    "MemoryJobDriver",
    "NackOutcome",
    "OutboxStore",
    "QueueSample",
    "QueueSampler",
    "QueueStats",
    "StepRecord",
    "StepState",
    "StepStore",
    "TaskFire",
    "WorkerRegistry",
    "WorkerRow",
    "install_job_driver",
    "installed_job_driver",
    "job_cursor",
    "job_driver",
    "memory_job_driver",
    "parse_job_cursor",
    "to_json_dict",
]
