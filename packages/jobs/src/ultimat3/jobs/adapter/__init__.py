"""The public driver SPI of ``ultimat3.jobs``: what a job driver implements and what crosses it.

A leaf: it imports ``ultimat3.core`` only. The port Protocols are split by concern —
``_driver`` (the driver, its step store and optional members), ``_operate`` (the operator
surface, ``JobIntrospection``), ``_stores`` (leases, backfills, event bus, outbox) — with the
values they speak (``_model``), the registry (``JOB_DRIVER``, ``install_job_driver``), the shared
introspection rules, cursors, ``Stepless`` and the drain types. ``ultimat3.jobs.memory``,
``ultimat3.jobs.postgres`` and ``ultimat3.jobs_redis`` build on this alone.

``memory_job_driver`` / ``MemoryJobDriver`` are re-exported lazily (they live in
``ultimat3.jobs.memory``, which imports this package), so this import path keeps working without
an import cycle.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ._cursor import job_cursor, parse_job_cursor
from ._drain import (
    MOVABLE_STATES,
    DrainBatch,
    DrainSource,
    Imported,
    ImportOutcome,
    JobImporter,
    MovedJob,
)
from ._driver import (
    EXHAUSTED_BUFFER,
    BatchSettler,
    ColumnEnqueuer,
    DriverEventBus,
    DueReporter,
    ExhaustionReporter,
    JobDriver,
    QueueSampler,
    QueueWake,
    SettleWatch,
    StepStore,
    TaskFirer,
    TransactionalStepStore,
    WakeHandle,
    WorkerRegistry,
    driver_backfills,
    driver_event_bus,
    driver_introspect,
    driver_leases,
    driver_members_missing,
    driver_settle_watch,
    driver_wake,
)
from ._introspect_rules import (
    check_cancellable_state,
    check_name,
    check_page,
    check_requeueable_state,
    check_state,
    job_id_of,
    job_not_found,
    sample_queue_names,
)
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
    AckRequest,
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
from ._operate import BulkCanceller, JobIntrospection
from ._redaction import (
    REDACTED,
    SENSITIVE_MARK,
    RedactionCatalog,
    RedactionPath,
    declared_paths,
    driver_redactions,
    redact_detail,
    redact_keys,
    redact_paths,
    sensitive_paths,
    show_redacted,
)
from ._registry import (
    EVENT_BUS,
    JOB_DRIVER,
    OUTBOX_STORE,
    install_job_driver,
    installed_job_driver,
    job_driver,
)
from ._stepless import Stepless
from ._stores import BackfillLedger, EventBus, LeaseStore, OutboxStore

if TYPE_CHECKING:
    from ultimat3.jobs.memory import MemoryJobDriver, memory_job_driver

_LAZY = {"MemoryJobDriver": "ultimat3.jobs.memory", "memory_job_driver": "ultimat3.jobs.memory"}


def __getattr__(name: str) -> object:
    """``from ultimat3.jobs.adapter import memory_job_driver`` (the pinned path), loaded lazily."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ultimat3.jobs.adapter' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ALL_STATES",
    "COUNTER_TIERS",
    "DEAD_RETENTION_MS",
    "DEPTH_SAMPLE_CAP",
    "DONE_RETENTION_MS",
    "ENQUEUE_CHUNK",
    "EVENT_BUS",
    "EXHAUSTED_BUFFER",
    "JOB_DRIVER",
    "LIVE_STATES",
    "MAX_BULK_ROWS",
    "MAX_ENQUEUE_BATCH",
    "MAX_JOB_PAGE",
    "MAX_TASK_FIRES",
    "MOVABLE_STATES",
    "OUTBOX_STORE",
    "PROMOTABLE_STATES",
    "REDACTED",
    "SENSITIVE_MARK",
    "TERMINAL_STATES",
    "AckRequest",
    "BackfillLedger",
    "BackfillRow",
    "BatchSettler",
    "BulkCanceller",
    "BulkResult",
    "ClaimedJob",
    "ColumnEnqueuer",
    "CounterRow",
    "CounterTotals",
    "DrainBatch",
    "DrainSource",
    "DriverEventBus",
    "DueReporter",
    "EnqueueColumns",
    "EnqueueRequest",
    "EnqueueResult",
    "EventBus",
    "ExhaustedJob",
    "ExhaustionReporter",
    "ImportOutcome",
    "Imported",
    "JobDetail",
    "JobDriver",
    "JobImporter",
    "JobIntrospection",
    "JobRow",
    "JobState",
    "LeaseGrant",
    "LeaseStore",
    "MemoryJobDriver",
    "MovedJob",
    "NackOutcome",
    "OutboxStore",
    "QueueSample",
    "QueueSampler",
    "QueueStats",
    "QueueWake",
    "RedactionCatalog",
    "RedactionPath",
    "SettleWatch",
    "StepRecord",
    "StepState",
    "StepStore",
    "Stepless",
    "TaskFire",
    "TaskFirer",
    "TransactionalStepStore",
    "WakeHandle",
    "WorkerRegistry",
    "WorkerRow",
    "check_cancellable_state",
    "check_name",
    "check_page",
    "check_requeueable_state",
    "check_state",
    "declared_paths",
    "driver_backfills",
    "driver_event_bus",
    "driver_introspect",
    "driver_leases",
    "driver_members_missing",
    "driver_redactions",
    "driver_settle_watch",
    "driver_wake",
    "install_job_driver",
    "installed_job_driver",
    "job_cursor",
    "job_driver",
    "job_id_of",
    "job_not_found",
    "memory_job_driver",
    "parse_job_cursor",
    "redact_detail",
    "redact_keys",
    "redact_paths",
    "sample_queue_names",
    "sensitive_paths",
    "show_redacted",
    "to_json_dict",
]
