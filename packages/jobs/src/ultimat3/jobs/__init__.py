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
from typing import TYPE_CHECKING

from ultimat3.jobs._declare.input_guard import MAX_INPUT_BYTES, MAX_INPUT_BYTES_CEILING
from ultimat3.jobs._declare.job import Job, job
from ultimat3.jobs._declare.policy import (
    DEFAULT_MAX_CRASHES,
    MAX_CRASHES_CEILING,
    UNWIND_MARGIN,
    Concurrency,
    Retry,
)
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

if TYPE_CHECKING:  # the factories, typed for mypy (`from ultimat3.jobs import backfill` is the
    # function, not `object`); loaded lazily at run time through _FACTORIES
    from ultimat3.jobs.factories.backfill import backfill as backfill
    from ultimat3.jobs.factories.consumer import CONSUMER_LINGER_MS as CONSUMER_LINGER_MS
    from ultimat3.jobs.factories.consumer import Consumer as Consumer
    from ultimat3.jobs.factories.consumer import ConsumerBatch as ConsumerBatch
    from ultimat3.jobs.factories.consumer import ConsumerCursor as ConsumerCursor
    from ultimat3.jobs.factories.consumer import ConsumerSource as ConsumerSource
    from ultimat3.jobs.factories.consumer import CursorStore as CursorStore
    from ultimat3.jobs.factories.consumer import consumer as consumer
    from ultimat3.jobs.factories.export_rows import ExportPage as ExportPage
    from ultimat3.jobs.factories.export_rows import export_rows as export_rows
    from ultimat3.jobs.factories.import_rows import ImportBatch as ImportBatch
    from ultimat3.jobs.factories.import_rows import ImportErrors as ImportErrors
    from ultimat3.jobs.factories.import_rows import import_rows as import_rows
    from ultimat3.jobs.factories.ledger import LedgerBook as LedgerBook
    from ultimat3.jobs.factories.ledger import LedgerLine as LedgerLine
    from ultimat3.jobs.factories.ledger import Posting as Posting
    from ultimat3.jobs.factories.ledger import PostingEntry as PostingEntry
    from ultimat3.jobs.factories.ledger import assert_balanced_posting as assert_balanced_posting
    from ultimat3.jobs.factories.ledger import ledger as ledger
    from ultimat3.jobs.factories.ledger_books import memory_ledger_book as memory_ledger_book
    from ultimat3.jobs.factories.ledger_books import postgres_ledger_book as postgres_ledger_book
    from ultimat3.jobs.factories.partitions import partitions as partitions
    from ultimat3.jobs.factories.refresh_view import refresh_view as refresh_view
    from ultimat3.jobs.factories.reindex import reindex as reindex
    from ultimat3.jobs.factories.rollup import Bucket as Bucket
    from ultimat3.jobs.factories.rollup import rollup as rollup
    from ultimat3.jobs.factories.subject import Anonymize as Anonymize
    from ultimat3.jobs.factories.subject import Retain as Retain
    from ultimat3.jobs.factories.subject import define_subject as define_subject
    from ultimat3.jobs.factories.subject import personal_data_problems as personal_data_problems
    from ultimat3.jobs.factories.subject import unerased_personal_data as unerased_personal_data
    from ultimat3.jobs.factories.subject import unreached_personal_data as unreached_personal_data
    from ultimat3.jobs.factories.subject_erase import subject_erase as subject_erase
    from ultimat3.jobs.factories.subject_export import subject_export as subject_export
    from ultimat3.jobs.factories.subject_proof import subject_proof as subject_proof
    from ultimat3.jobs.factories.webhook import (
        DEFAULT_WEBHOOK_DISABLE_AFTER as DEFAULT_WEBHOOK_DISABLE_AFTER,
    )
    from ultimat3.jobs.factories.webhook import WebhookDelivery as WebhookDelivery
    from ultimat3.jobs.factories.webhook import WebhookEndpoint as WebhookEndpoint
    from ultimat3.jobs.factories.webhook import WebhookEvent as WebhookEvent
    from ultimat3.jobs.factories.webhook import webhook as webhook
    from ultimat3.jobs.factories.webhook_ledger import WebhookAttempt as WebhookAttempt
    from ultimat3.jobs.factories.webhook_ledger import WebhookLedger as WebhookLedger
    from ultimat3.jobs.factories.webhook_ledger import (
        memory_webhook_ledger as memory_webhook_ledger,
    )
    from ultimat3.jobs.factories.webhook_ledger import (
        postgres_webhook_ledger as postgres_webhook_ledger,
    )
    from ultimat3.jobs.factories.webhook_receiver import (
        DEFAULT_WEBHOOK_BODY_LIMIT as DEFAULT_WEBHOOK_BODY_LIMIT,
    )
    from ultimat3.jobs.factories.webhook_receiver import ReceivedWebhook as ReceivedWebhook
    from ultimat3.jobs.factories.webhook_receiver import ReceiverDelivery as ReceiverDelivery
    from ultimat3.jobs.factories.webhook_receiver import webhook_receiver as webhook_receiver

# name -> module under ultimat3.jobs.factories (one module each), loaded on first use
_FACTORIES: dict[str, str] = {
    "backfill": "backfill",
    "CONSUMER_LINGER_MS": "consumer",
    "Consumer": "consumer",
    "ConsumerBatch": "consumer",
    "ConsumerCursor": "consumer",
    "ConsumerSource": "consumer",
    "CursorStore": "consumer",
    "consumer": "consumer",
    "LedgerBook": "ledger",
    "LedgerLine": "ledger",
    "Posting": "ledger",
    "PostingEntry": "ledger",
    "assert_balanced_posting": "ledger",
    "ledger": "ledger",
    "memory_ledger_book": "ledger_books",
    "postgres_ledger_book": "ledger_books",
    # issue 19: webhooks both ways
    "webhook": "webhook",
    "WebhookDelivery": "webhook",
    "WebhookEndpoint": "webhook",
    "WebhookEvent": "webhook",
    "DEFAULT_WEBHOOK_DISABLE_AFTER": "webhook",
    "WebhookAttempt": "webhook_ledger",
    "WebhookLedger": "webhook_ledger",
    "memory_webhook_ledger": "webhook_ledger",
    "postgres_webhook_ledger": "webhook_ledger",
    "webhook_receiver": "webhook_receiver",
    "ReceivedWebhook": "webhook_receiver",
    "ReceiverDelivery": "webhook_receiver",
    "DEFAULT_WEBHOOK_BODY_LIMIT": "webhook_receiver",
    # issue 18: bulk files
    "import_rows": "import_rows",
    "ImportBatch": "import_rows",
    "ImportErrors": "import_rows",
    "export_rows": "export_rows",
    "ExportPage": "export_rows",
    # issue 24: the entity factories
    "Bucket": "rollup",
    "partitions": "partitions",
    "refresh_view": "refresh_view",
    "reindex": "reindex",
    "rollup": "rollup",
    "Anonymize": "subject",
    "Retain": "subject",
    "define_subject": "subject",
    "personal_data_problems": "subject",
    "unerased_personal_data": "subject",
    "unreached_personal_data": "subject",
    "subject_erase": "subject_erase",
    "subject_export": "subject_export",
    "subject_proof": "subject_proof",
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
    "DEFAULT_MAX_CRASHES",
    "ENQUEUE_CHUNK",
    "MAX_BULK_ROWS",
    "MAX_CATCH_UP",
    "MAX_CRASHES_CEILING",
    "MAX_ENQUEUE_BATCH",
    "MAX_INPUT_BYTES",
    "MAX_INPUT_BYTES_CEILING",
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
