"""The driver port: ``JobDriver`` and its step store, and the optional members a driver may
offer (worker registry, task firer, column enqueue, batch settles, exhaustion, sampling, wake).

A driver is any object with these members (``typing.Protocol``: no base class to inherit).
``memory_job_driver()`` is the one to copy; ``JobDriverConformance`` (``ultimat3.jobs.testing``)
proves yours. Every settle, step write and heartbeat is FENCED on ``(worker_id, claim)``: it lands
only while that claim still holds the row, and answers whether it landed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ._model import (
    AckRequest,
    ClaimedJob,
    EnqueueColumns,
    EnqueueRequest,
    EnqueueResult,
    ExhaustedJob,
    NackOutcome,
    QueueSample,
    QueueStats,
    StepRecord,
    StepState,
    WorkerRow,
)
from ._operate import JobIntrospection
from ._stores import BackfillLedger, EventBus, LeaseStore


@runtime_checkable
class StepStore(Protocol):
    """Step persistence lives with the queue: one store, one transaction boundary."""

    async def load(self, job_id: str) -> dict[str, StepRecord]:
        """Every step recorded for the job, by name."""
        ...

    async def record(
        self,
        job_id: str,
        name: str,
        *,
        state: StepState,
        worker_id: str,
        claim: str,
        output: Any = None,
        error: Mapping[str, Any] | None = None,
    ) -> bool:
        """Write one step, fenced on the claim. ``completed`` and ``failed`` count one execution
        (``executions + 1``); ``started`` (a once-step's marker) does not. A ``completed`` step is
        never overwritten. Answers whether the write landed."""
        ...


@runtime_checkable
class TransactionalStepStore(Protocol):
    """Optional, beside ``StepStore``: ``step.transaction``. A store whose database can hold the
    step's record and the app's effect in ONE transaction (Postgres) implements it; a driver
    without it (Redis) refuses ``step.transaction`` with ``X_CONFIG_INVALID``."""

    async def record_in_transaction(
        self,
        job_id: str,
        name: str,
        *,
        worker_id: str,
        claim: str,
        fn: Callable[[Any], Awaitable[Any]],
    ) -> tuple[bool, Any]:
        """Open a transaction, await ``fn(connection)`` (it answers the step's output, already in
        JSON form), write the step ``completed`` with that output fenced on the claim, and
        commit — or roll back everything (``fn``'s writes too) when ``fn`` raises or the fence
        fails. Answers ``(landed, output)``; ``landed`` is ``False`` when the claim was lost."""
        ...


@runtime_checkable
class WorkerRegistry(Protocol):
    """Optional driver members behind ``introspect.workers()``: a worker registers at start,
    heartbeats while it runs and deregisters at stop. A row expires one visibility timeout after
    its last heartbeat, so a killed worker leaves by expiry."""

    async def register_worker(
        self,
        worker_id: str,
        *,
        host: str,
        queues: Sequence[str],
        slots: int | None,
        visibility_timeout_ms: int,
    ) -> WorkerRow: ...

    async def worker_heartbeat(self, worker_id: str, *, in_flight: Sequence[str]) -> bool:
        """Renew the row and record the job ids in flight; ``False`` for a worker the driver does
        not know (never registered, deregistered or purged): register again."""
        ...

    async def deregister_worker(self, worker_id: str) -> bool: ...


@runtime_checkable
class TaskFirer(Protocol):
    """Optional driver member the scheduler needs: ONE occurrence of a task, its watermark and
    its jobs moved in one atomic operation (Postgres: one statement; Redis: one script), so a
    crash between the two cannot fire it twice."""

    async def fire_task(
        self, task: str, occurrence_ms: int, requests: Sequence[EnqueueRequest]
    ) -> bool:
        """When ``occurrence_ms`` is later than the task's recorded fire and the task is not
        paused: record it and queue ``requests`` (deduped as ``enqueue_many`` dedupes); answers
        ``True``. Otherwise nothing is queued or recorded; answers ``False``. Every request is
        checked before anything moves."""
        ...


@runtime_checkable
class ColumnEnqueuer(Protocol):
    """Optional driver member: ``enqueue_many`` of ONE job handed over as columns
    (``EnqueueColumns``), so a batch of thousands builds no per-row request object on its way
    to the driver. Same contract as ``enqueue_many`` of ``columns.requests()``: every row
    checked before the first write, dedupe on the live key and the id, results in input order.
    The facade calls it only outside a transaction the driver cannot join."""

    async def enqueue_columns(
        self, columns: EnqueueColumns, *, connection: object | None = None
    ) -> list[EnqueueResult]: ...


@runtime_checkable
class BatchSettler(Protocol):
    """Optional driver members: many settles of ONE worker in one round trip each (the Postgres
    driver: one statement, one commit). A worker that finds them batches its acks and lease
    renewals; each item is fenced exactly like ``ack`` / ``heartbeat``, and the answer says, per
    item and in input order, whether it landed."""

    async def ack_many(self, acks: Sequence[AckRequest], *, worker_id: str) -> list[bool]: ...

    async def heartbeat_many(
        self,
        leases: Sequence[tuple[str, str]],
        *,
        worker_id: str,
        visibility_timeout_ms: int,
    ) -> list[bool]:
        """Renew every ``(job_id, claim)`` lease the worker holds."""
        ...


EXHAUSTED_BUFFER = 10_000
"""The most buried rows a driver keeps for ``take_exhausted``; older ones are forgotten."""


@runtime_checkable
class ExhaustionReporter(Protocol):
    """Optional driver member: the rows this driver's claims BURIED (a lease lapsed on the final
    attempt, settled ``dead`` / ``failed`` by the claim itself), so the worker that claimed can
    tell ``on_settled`` (``dead-lettered`` / ``dropped``) and count them."""

    def take_exhausted(self) -> list[ExhaustedJob]:
        """Answer and forget the rows buried since the last call, oldest first (at most the last
        ``EXHAUSTED_BUFFER``)."""
        ...


@runtime_checkable
class DueReporter(Protocol):
    """Optional driver member: what a worker's last claim read of the work due LATER, so it arms
    one timer for it instead of polling faster (a delayed job, a sleeping run, a retry backoff
    starts within tens of ms of its due time)."""

    def take_next_due(self, worker_id: str) -> int | None:
        """Answer and forget the ms (from the moment ``worker_id``'s last claim was answered)
        until the earliest row of its queues that falls due later; ``None`` when that claim
        read none (no such row, or it handed out its whole limit)."""
        ...


@runtime_checkable
class QueueSampler(Protocol):
    """Optional driver member: ``queue_depth`` / ``queue_demand`` for the worker's gauges. ONE
    set-based read of the store for every queue named (no write, no lock), each count capped at
    ``DEPTH_SAMPLE_CAP``; a driver without it reports no depth."""

    async def sample_queues(self, queues: Sequence[str]) -> list[QueueSample]:
        """One ``QueueSample`` per distinct queue named, in the order first named."""
        ...


@runtime_checkable
class WakeHandle(Protocol):
    """What ``QueueWake.start_wake`` answers: ``await handle.stop()`` ends the listening.

    A handle MAY carry a bool ``proven``: True while the push is known to arrive (the Postgres
    LISTEN session answered its probe, ``jobs.wake.live``). A worker then lets its idle poll
    stretch to 5 s; without it (or while it is False) the ceiling stays ``idle_poll_max_ms``."""

    async def stop(self) -> None: ...


@runtime_checkable
class QueueWake(Protocol):
    """Optional driver member: a push telling a worker that a job of its queues became due, so
    an idle worker passes at once instead of at its next poll (Postgres: LISTEN/NOTIFY; Redis:
    pub/sub). ``job_worker(...).start()`` starts it with its own ``wake`` and stops it with the
    worker. The push is a hint: a lost one costs the wait until the next poll, never a job."""

    async def start_wake(
        self, on_wake: Callable[[str], object], *, queues: Collection[str] | None = None
    ) -> WakeHandle:
        """Start listening; ``on_wake(queue)`` runs when a job of one of ``queues`` (every queue
        when ``None``) may be due (``'*'``: any of them)."""
        ...


@runtime_checkable
class SettleWatch(Protocol):
    """Optional driver member: a push when a run settles for good (``done``, ``failed``,
    ``dead``, ``cancelled``), so ``await job.result(id)`` wakes at the settle instead of polling
    (Postgres: a LISTEN on the settle's notification; memory: in-process futures).

    ``await watch_settled(job_id)`` registers BEFORE the caller reads the row (so a settle in
    between is not missed) and answers a future resolved when that run may have settled;
    ``unwatch_settled(job_id, future)`` drops it. A driver without it is polled (with backoff)."""

    async def watch_settled(self, job_id: str) -> asyncio.Future[None]: ...

    def unwatch_settled(self, job_id: str, future: asyncio.Future[None]) -> None: ...


@runtime_checkable
class DriverEventBus(Protocol):
    """Optional driver member: the event bus over the driver's own store (Postgres:
    ``postgres_event_bus(driver)``; memory: ``memory_event_bus(driver)``), answered the same
    every call. A worker with no bus passed and none installed on ``EVENT_BUS`` waits on it."""

    def event_bus(self) -> EventBus: ...


@runtime_checkable
class JobDriver(Protocol):
    """The jobs adapter port. Job code never changes when the driver does."""

    @property
    def name(self) -> str: ...

    @property
    def steps(self) -> StepStore: ...

    async def now_ms(self) -> int:
        """The driver's clock (the database's, on a stored driver), epoch milliseconds."""
        ...

    def owns_connection(self, connection: object) -> bool:
        """Whether an ambient connection is one this driver can enqueue on, inside the caller's
        transaction. A driver answering ``False`` for an ambient connection gets the outbox."""
        ...

    async def enqueue(
        self, request: EnqueueRequest, *, connection: object | None = None
    ) -> EnqueueResult:
        """Queue one job, deduped on the live key ``(name, tenant_id, idempotency_key)``."""
        ...

    async def enqueue_many(
        self, requests: Sequence[EnqueueRequest], *, connection: object | None = None
    ) -> list[EnqueueResult]:
        """One round trip per ``ENQUEUE_CHUNK`` requests; results in input order."""
        ...

    async def claim(
        self,
        *,
        queues: Sequence[str],
        limit: int,
        worker_id: str,
        visibility_timeout_ms: int,
        no_dead_letter: Collection[str] = (),
    ) -> list[ClaimedJob]:
        """Hand out at most ``limit`` due jobs of unpaused ``queues``; counts the attempt. A lapsed
        lease is re-offered; a lapse on a row's final attempt is settled ``dead`` by the claim
        itself (``failed`` for the job names in ``no_dead_letter``) and never handed out.

        A lapse whose worker is known dead (its ``WorkerRegistry`` row expired) is a CRASH, not
        an attempt: re-offered with the attempt handed back, ``crash_streak`` one up and
        ``crashed_worker`` set (never buried); a lapse whose worker's live row names the job in
        flight waits, at most one more window. A settled attempt (``nack`` retry / dead /
        failed) ends the streak. ``JobDriverConformance`` holds all of it."""
        ...

    async def ack(
        self,
        job_id: str,
        *,
        worker_id: str,
        claim: str,
        result: Any = None,
        duration_ms: int | None = None,
    ) -> bool: ...

    async def nack(
        self,
        job_id: str,
        *,
        worker_id: str,
        claim: str,
        outcome: NackOutcome,
        error: Mapping[str, Any] | None = None,
        delay_ms: int | None = None,
        run_at_ms: int | None = None,
        wait_event: str | None = None,
    ) -> bool:
        """Settle a failed, suspended or handed-back attempt; see ``NackOutcome``. ``wait_event``
        names the event a suspended row waits on, so a publish can wake it."""
        ...

    async def heartbeat(
        self, job_id: str, *, worker_id: str, claim: str, visibility_timeout_ms: int
    ) -> bool: ...

    async def progress(
        self, job_id: str, *, worker_id: str, claim: str, progress: Mapping[str, Any]
    ) -> bool: ...

    async def wake_waiters(self, event: str) -> int:
        """Make every row suspended on ``event`` due now; answers how many."""
        ...

    async def stats(self) -> list[QueueStats]: ...

    async def close(self) -> None: ...


def driver_members_missing(driver: object) -> list[str]:
    """The required ``JobDriver`` members an object lacks (for a clear refusal)."""
    required = (
        "name",
        "steps",
        "now_ms",
        "owns_connection",
        "enqueue",
        "enqueue_many",
        "claim",
        "ack",
        "nack",
        "heartbeat",
        "progress",
        "wake_waiters",
        "stats",
        "close",
    )
    return [m for m in required if not hasattr(driver, m)]


def driver_leases(driver: object) -> LeaseStore | None:
    leases = getattr(driver, "leases", None)
    return leases if isinstance(leases, LeaseStore) else None


def driver_wake(driver: object) -> QueueWake | None:
    """The driver's wake (``start_wake``), when it offers one."""
    return driver if isinstance(driver, QueueWake) else None


def driver_settle_watch(driver: object) -> SettleWatch | None:
    """The driver's settle push (``watch_settled``), when it offers one."""
    return driver if isinstance(driver, SettleWatch) else None


def driver_event_bus(driver: object) -> EventBus | None:
    """The driver's own event bus (``event_bus()``), when it offers one."""
    return driver.event_bus() if isinstance(driver, DriverEventBus) else None


def driver_introspect(driver: object) -> JobIntrospection | None:
    intro = getattr(driver, "introspect", None)
    return intro if intro is not None else None


def driver_backfills(driver: object) -> BackfillLedger | None:
    return getattr(driver, "backfills", None)
