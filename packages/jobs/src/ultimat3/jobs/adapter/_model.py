"""The values that cross the driver port: requests, claimed jobs, rows, steps, stats.

Every driver (memory, Postgres, Redis, yours) speaks in these. They are frozen dataclasses that
serialise to JSON with :func:`to_json_dict`. Times are aware UTC datetimes on rows and epoch
milliseconds on the wire to and from the worker (``*_ms``), always read off the DRIVER's clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

from ultimat3.core import XError

JobState = Literal[
    "ready", "delayed", "running", "suspended", "done", "failed", "dead", "cancelled"
]
LIVE_STATES: Final[tuple[JobState, ...]] = ("ready", "delayed", "running", "suspended")
TERMINAL_STATES: Final[tuple[JobState, ...]] = ("done", "failed", "dead", "cancelled")
# A job waiting on its run_at: delayed, or ready backing off before a retry.
PROMOTABLE_STATES: Final[tuple[JobState, ...]] = ("delayed", "ready")
ALL_STATES: Final[tuple[JobState, ...]] = LIVE_STATES + TERMINAL_STATES

StepState = Literal["started", "completed", "failed"]

NackOutcome = Literal["retry", "dead", "failed", "suspend", "release"]
"""What a nack does to the row.

- ``retry``: back to ``ready`` with ``run_at`` in the future (a backoff); counted as retried.
- ``dead``: attempts exhausted or terminal: settled ``dead`` (the dead letter); counted.
- ``failed``: settled ``failed`` (``when_busy='fail'`` refusal, or ``dead_letter=False``); counted.
- ``suspend``: ``step.sleep`` / ``step.wait_for_event``: ``suspended`` until ``run_at``; the
  attempt is handed back uncounted.
- ``release``: a drain, a busy ``'wait'`` lease, a rate limit: back to ``ready`` with the attempt
  handed back uncounted.
"""

MAX_JOB_PAGE: Final = 200
MAX_BULK_ROWS: Final = 1000
MAX_ENQUEUE_BATCH: Final = 10_000
MAX_TASK_FIRES: Final = 1000
ENQUEUE_CHUNK: Final = 1000
"""One round trip (statement / script) per this many inputs in ``enqueue_many``."""
COUNTER_TIERS: Final[tuple[tuple[int, int], ...]] = (
    (60_000, 86_400_000),
    (300_000, 7 * 86_400_000),
    (3_600_000, 30 * 86_400_000),
)
"""``(bucket_ms, kept_ms)`` per tier of the settle counters: 1-minute buckets kept 24 h, 5-minute
buckets kept 7 d, 1-hour buckets kept 30 d. A read uses the finest tier still covering its
``since_ms``."""
DONE_RETENTION_MS: Final = 14 * 86_400_000
"""How long a ``done`` row is kept before the purge deletes it."""
DEAD_RETENTION_MS: Final = 90 * 86_400_000
"""How long a ``dead`` / ``failed`` / ``cancelled`` row is kept before the purge deletes it."""


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """One job to queue. ``id`` and ``run_id`` are allocated by the caller (the facade) so an
    outbox row is published under the id it was staged with."""

    id: str
    run_id: str
    name: str
    queue: str
    payload: Any
    idempotency_key: str
    max_attempts: int
    tenant_id: str | None = None
    concurrency_key: str | None = None
    delay_ms: int | None = None
    """Relative to the driver's clock; ``run_at_ms`` wins when both are set."""
    run_at_ms: int | None = None
    trace_context: Mapping[str, str] | None = None
    """The enqueuing span's propagation headers (``traceparent`` / ``tracestate``), stored on
    the row so the run's span links to it; ``None`` when no span was active."""


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    id: str
    run_id: str
    deduped: bool


@dataclass(frozen=True, slots=True)
class EnqueueColumns:
    """Many runs of ONE job as columns: the shape ``enqueue_many`` builds, handed to a driver
    that queues it without a per-row object (``ColumnEnqueuer``). Row ``i`` is
    ``EnqueueRequest(ids[i], run_ids[i], name, queue, payloads[i], idempotency_keys[i],
    max_attempts, tenant_ids[i], None, delay_ms, run_at_ms, trace_context)``; every column has
    one entry per row, in input order. :meth:`requests` answers exactly those rows."""

    name: str
    queue: str
    max_attempts: int
    ids: Sequence[str]
    run_ids: Sequence[str]
    payloads: Sequence[Any]
    idempotency_keys: Sequence[str]
    tenant_ids: Sequence[str | None]
    delay_ms: int | None = None
    run_at_ms: int | None = None
    trace_context: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        size = len(self.ids)
        lengths = {
            "run_ids": len(self.run_ids),
            "payloads": len(self.payloads),
            "idempotency_keys": len(self.idempotency_keys),
            "tenant_ids": len(self.tenant_ids),
        }
        uneven = {column: n for column, n in lengths.items() if n != size}
        if uneven:
            raise XError(
                "X_INVARIANT",
                f"EnqueueColumns of job {self.name!r}: {size} ids but "
                + ", ".join(f"{n} {column}" for column, n in uneven.items()),
                fix="give every column one entry per row, in the same order",
                meta={"job": self.name, "ids": size, **uneven},
            )

    def __len__(self) -> int:
        return len(self.ids)

    def requests(self) -> list[EnqueueRequest]:
        """The rows as ``EnqueueRequest``s (for a driver, an outbox or a check that takes
        them one by one)."""
        name, queue, attempts = self.name, self.queue, self.max_attempts
        delay_ms, run_at_ms, trace = self.delay_ms, self.run_at_ms, self.trace_context
        return [
            EnqueueRequest(
                id,
                run_id,
                name,
                queue,
                payload,
                key,
                attempts,
                tenant,
                None,
                delay_ms,
                run_at_ms,
                trace,
            )
            for id, run_id, payload, key, tenant in zip(
                self.ids,
                self.run_ids,
                self.payloads,
                self.idempotency_keys,
                self.tenant_ids,
                strict=True,
            )
        ]


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job handed to one worker under one claim. ``attempt`` is already counted."""

    id: str
    run_id: str
    name: str
    queue: str
    payload: Any
    attempt: int
    max_attempts: int
    claim: str
    worker_id: str
    claimed_at_ms: int
    """The driver's clock at the claim: the worker's "now" for sleeps and waits."""
    lease_expires_at_ms: int
    idempotency_key: str
    tenant_id: str | None = None
    concurrency_key: str | None = None
    created_at_ms: int = 0
    trace_context: Mapping[str, str] | None = None
    """The enqueuing span's propagation headers stored on the row, if any."""
    crash_streak: int = 0
    """Crashes on record since the run last settled an attempt (a lapse whose worker was known
    dead counts one; a crash after a step completed since the crash before starts again at 1).
    Above 0 the worker runs the job isolated (``_process/isolation.py``)."""
    crashed_worker: str | None = None
    """Set when THIS claim follows a crash: the worker that died holding the run."""


@dataclass(frozen=True, slots=True)
class ExhaustedJob:
    """A row a CLAIM itself buried: its lease lapsed on its final attempt, so the claim settled
    it ``dead`` (``failed`` for a ``no_dead_letter`` name) instead of handing it out
    (``ExhaustionReporter.take_exhausted``)."""

    id: str
    name: str
    queue: str
    payload: Any
    tenant_id: str | None
    outcome: Literal["dead", "failed"]
    last_error: Mapping[str, Any] | None
    run_id: str = ""
    attempt: int = 0
    """The attempt whose lease lapsed (the row's ``attempts``, its last)."""


@dataclass(frozen=True, slots=True)
class StepRecord:
    name: str
    state: StepState
    executions: int = 0
    output: Any = None
    error: Mapping[str, Any] | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class JobRow:
    id: str
    run_id: str
    name: str
    queue: str
    state: JobState
    attempts: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    idempotency_key: str
    payload: Any = None
    tenant_id: str | None = None
    concurrency_key: str | None = None
    last_error: Mapping[str, Any] | None = None
    progress: Mapping[str, Any] | None = None
    result: Any = None
    worker_id: str | None = None
    lease_expires_at: datetime | None = None
    finished_at: datetime | None = None
    crashes: int = 0
    """Lapses whose worker was known dead (its process died holding the run), every attempt."""


@dataclass(frozen=True, slots=True)
class JobDetail(JobRow):
    """``introspect.show(id)``: the row with its steps, by step name."""

    steps: Mapping[str, StepRecord] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    ready: int = 0
    delayed: int = 0
    running: int = 0
    suspended: int = 0
    done: int = 0
    failed: int = 0
    dead: int = 0
    cancelled: int = 0


DEPTH_SAMPLE_CAP: Final = 100_000
"""``sample_queues`` counts at most this many rows per queue and state group: a sample stays one
bounded index read whatever the backlog (a gauge reading the cap means "at least this many")."""


@dataclass(frozen=True, slots=True)
class QueueSample:
    """One queue's load at one instant (``QueueSampler.sample_queues``), each count capped at
    ``DEPTH_SAMPLE_CAP``."""

    queue: str
    depth: int
    """Jobs due now that no worker holds: ``ready`` / ``delayed`` / ``suspended`` rows whose
    ``run_at`` has passed (a retry still backing off, a sleep not yet over, are not due)."""
    running: int
    """Jobs a worker holds (``running``, a lapsed lease included until a claim takes it back)."""
    paused: bool = False

    @property
    def demand(self) -> int:
        """What the queue asks of the fleet now: the runs in flight plus the due backlog (none
        for a paused queue, which no worker may claim). The worker HPA's target: demand over
        slots per replica."""
        return self.running + (0 if self.paused else self.depth)


@dataclass(frozen=True, slots=True)
class BulkResult:
    affected: int
    remaining: int


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    """One held slot of a lease key (``x_job_leases`` row)."""

    key: str
    slot: int
    holder: str
    token: int
    expires_at_ms: int


@dataclass(frozen=True, slots=True)
class WorkerRow:
    id: str
    host: str
    started_at: datetime
    queues: tuple[str, ...]
    slots: int | None
    in_flight: tuple[str, ...]
    last_heartbeat_at: datetime


@dataclass(frozen=True, slots=True)
class TaskFire:
    task: str
    occurrence_ms: int
    fired_at: datetime


@dataclass(frozen=True, slots=True)
class CounterRow:
    job: str
    bucket_start: datetime
    bucket_ms: int
    done: int = 0
    retried: int = 0
    failed: int = 0
    dead: int = 0
    duration_ms: int = 0


@dataclass(frozen=True, slots=True)
class CounterTotals:
    done: int = 0
    retried: int = 0
    failed: int = 0
    dead: int = 0
    duration_ms: int = 0


@dataclass(frozen=True, slots=True)
class AckRequest:
    """One ack of a batch (``BatchSettler.ack_many``): the run, its claim, what it returned."""

    job_id: str
    claim: str
    result: Any = None
    duration_ms: int | None = None


@dataclass(frozen=True, slots=True)
class BackfillRow:
    id: str
    name: str
    state: str
    rows: int
    cursor: Any
    started_at: datetime
    updated_at: datetime
    job_id: str | None = None


def to_json_dict(value: Any) -> Any:
    """A row (or a list/mapping of rows) as plain JSON data: datetimes as ISO strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json_dict(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): to_json_dict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_dict(v) for v in value]
    return value
