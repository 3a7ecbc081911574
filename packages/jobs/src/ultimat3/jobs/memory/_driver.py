"""The memory job driver: a real driver over plain dicts, for tests, fixtures and the harness.

Every member of ``JobDriver`` behaves as the contract says (``JobDriverConformance`` proves it),
with the optional ``leases``, ``introspect`` and ``backfills`` members as well. Each operation is
atomic because none awaits in the middle: no lock is needed on one event loop. Values are stored
as JSON text, so a caller can never mutate a stored row through a payload, result or step output
it was handed (or handed in).

**Nothing survives a restart.** The queue is a dict inside this process: when the process exits,
every queued, running and dead-lettered job goes with it. Use it in tests and throwaway scripts;
an app's durable queue is ``postgres_job_driver(...)``.

Time is the driver's own clock: the ``clock`` it was built with, else the ambient
``current_clock()`` read at each call, so a ``FrozenClock`` (``use_clock``) drives run_at,
leases, expiry and counters.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final

from ultimat3.core import Clock, XError, from_epoch_ms, log_event, new_id
from ultimat3.jobs.adapter import (
    DEAD_RETENTION_MS,
    DEPTH_SAMPLE_CAP,
    DONE_RETENTION_MS,
    EXHAUSTED_BUFFER,
    MAX_ENQUEUE_BATCH,
    TERMINAL_STATES,
    AckRequest,
    ClaimedJob,
    EnqueueRequest,
    EnqueueResult,
    ExhaustedJob,
    JobState,
    NackOutcome,
    QueueSample,
    QueueStats,
    WorkerRow,
    sample_queue_names,
)

from ._backfills import MemoryBackfillLedger
from ._counters import CounterKind
from ._events import MemoryEventBus, memory_event_bus
from ._introspect import MemoryJobIntrospection
from ._leases import MemoryLeaseStore
from ._redactions import MemoryRedactionCatalog
from ._state import MemoryState, MemRow, MemWorker, freeze, lapse_verdict
from ._steps import MemoryStepStore, held

NACK_OUTCOMES: Final[tuple[NackOutcome, ...]] = ("retry", "dead", "failed", "suspend", "release")


def _positive(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise XError(
            "X_INVARIANT",
            f"{what} {value!r} is not a positive whole number of milliseconds",
            fix=f"pass {what}=30000 or another positive int",
        )
    return value


def _result_json(job_id: str, result: Any) -> str:
    return freeze(result, what=f"the result of job {job_id}", code="X_STEP_OUTPUT_UNSERIALIZABLE")


class MemoryWake:
    """``MemoryJobDriver.start_wake``'s handle: hears the driver's enqueues, calls ``on_wake``
    once per event-loop turn per queue (off the enqueuer's call)."""

    proven = False
    """The idle poll keeps its ``idle_poll_max_ms`` ceiling (a frozen clock moves no push)."""

    def __init__(
        self,
        on_wake: Callable[[str], object],
        queues: frozenset[str] | None,
        registry: set[MemoryWake],
    ) -> None:
        self._on_wake = on_wake
        self._queues = queues
        self._registry = registry
        self._heard: set[str] = set()

    def hear(self, queue: str) -> None:
        if self._queues is not None and queue not in self._queues:
            return
        if not self._heard:
            with contextlib.suppress(RuntimeError):  # no running loop: the poll finds it
                asyncio.get_running_loop().call_soon(self._tell)
        self._heard.add(queue)

    def _tell(self) -> None:
        heard, self._heard = self._heard, set()
        if self in self._registry:
            for queue in sorted(heard):
                self._on_wake(queue)

    async def stop(self) -> None:
        self._registry.discard(self)


class MemoryJobDriver:
    """The in-process ``JobDriver``. **Nothing survives a restart**: see the module docstring."""

    def __init__(self, *, clock: Clock | None = None, name: str = "memory") -> None:
        self._name = name
        self._s = MemoryState(clock=clock)
        self._steps = MemoryStepStore(self._s)
        self.leases = MemoryLeaseStore(self._s.now_ms)
        self.introspect = MemoryJobIntrospection(self._s)
        self.backfills = MemoryBackfillLedger(self._s.now_ms)
        self.redactions = MemoryRedactionCatalog()
        self._bus: MemoryEventBus | None = None
        self._exhausted: deque[ExhaustedJob] = deque(maxlen=EXHAUSTED_BUFFER)
        self._next_due: dict[str, int] = {}
        self._wakes: set[MemoryWake] = set()

    def __repr__(self) -> str:
        return f"MemoryJobDriver(name={self._name!r}, jobs={len(self._s.rows)})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def steps(self) -> MemoryStepStore:
        return self._steps

    async def now_ms(self) -> int:
        return self._s.now_ms()

    async def watch_settled(self, job_id: str) -> asyncio.Future[None]:
        """``SettleWatch``: a future resolved when ``job_id`` reaches a terminal state."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._s.settle_watchers.setdefault(job_id, []).append(future)
        return future

    def unwatch_settled(self, job_id: str, future: asyncio.Future[None]) -> None:
        watchers = self._s.settle_watchers.get(job_id)
        if watchers is not None and future in watchers:
            watchers.remove(future)
            if not watchers:
                del self._s.settle_watchers[job_id]

    def owns_connection(self, connection: object) -> bool:
        """Never: the memory driver joins no database transaction, so an enqueue made inside one
        goes to the outbox."""
        return False

    # --- enqueue --------------------------------------------------------------------------

    def _prepare(self, req: EnqueueRequest) -> str:
        """Check one request; answers its payload as JSON text. Nothing is written."""
        for field_name in ("id", "run_id", "name", "queue", "idempotency_key"):
            value = getattr(req, field_name)
            if not isinstance(value, str) or not value:
                raise XError(
                    "X_INVARIANT",
                    f"enqueue of job {req.id!r} ({req.name!r}): {field_name} is empty",
                    fix="enqueue through the job handle (job.enqueue), which fills every field",
                    meta={"job_id": req.id, "field": field_name},
                )
        attempts = req.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise XError(
                "X_INVARIANT",
                f"enqueue of job {req.id} ({req.name}): max_attempts {attempts!r} is not >= 1",
                fix="declare retry=Retry(attempts=n) with n >= 1",
            )
        return freeze(req.payload, what=f"the payload of job {req.id} ({req.name})")

    def _insert(self, req: EnqueueRequest, payload_json: str, now: int) -> EnqueueResult:
        holder = self._s.live_holder((req.name, req.tenant_id, req.idempotency_key))
        if holder is not None:
            return EnqueueResult(id=holder.id, run_id=holder.run_id, deduped=True)
        same = self._s.rows.get(req.id)
        if same is not None:
            return EnqueueResult(id=same.id, run_id=same.run_id, deduped=True)
        run_at = req.run_at_ms if req.run_at_ms is not None else now + (req.delay_ms or 0)
        self._s.insert(
            MemRow(
                id=req.id,
                run_id=req.run_id,
                name=req.name,
                queue=req.queue,
                state="delayed" if run_at > now else "ready",
                attempts=0,
                max_attempts=req.max_attempts,
                run_at_ms=run_at,
                created_at_ms=now,
                updated_at_ms=now,
                idempotency_key=req.idempotency_key,
                payload_json=payload_json,
                tenant_id=req.tenant_id,
                concurrency_key=req.concurrency_key,
                trace_context=req.trace_context,
            )
        )
        if self._wakes:
            self._announce(req.queue)
        return EnqueueResult(id=req.id, run_id=req.run_id, deduped=False)

    async def enqueue(
        self, request: EnqueueRequest, *, connection: object | None = None
    ) -> EnqueueResult:
        payload_json = self._prepare(request)
        return self._insert(request, payload_json, self._s.now_ms())

    async def enqueue_many(
        self, requests: Sequence[EnqueueRequest], *, connection: object | None = None
    ) -> list[EnqueueResult]:
        """All or nothing: every request is checked before the first is written."""
        if len(requests) > MAX_ENQUEUE_BATCH:
            raise XError(
                "X_JOB_ENQUEUE_BATCH_TOO_LARGE",
                f"enqueue_many of {len(requests)} jobs is past MAX_ENQUEUE_BATCH "
                f"({MAX_ENQUEUE_BATCH})",
                fix="page the source with backfill(), or enqueue at most 10,000 at a time",
            )
        prepared = [self._prepare(req) for req in requests]
        now = self._s.now_ms()
        return [self._insert(req, p, now) for req, p in zip(requests, prepared, strict=True)]

    # --- claim ----------------------------------------------------------------------------

    async def claim(
        self,
        *,
        queues: Sequence[str],
        limit: int,
        worker_id: str,
        visibility_timeout_ms: int,
        no_dead_letter: Collection[str] = (),
    ) -> list[ClaimedJob]:
        _positive(visibility_timeout_ms, "visibility_timeout_ms")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise XError("X_INVARIANT", f"claim: limit {limit!r} is not a count", fix="limit=1+")
        if not worker_id:
            raise XError("X_INVARIANT", "claim: worker_id is empty", fix="name the worker")
        now = self._s.now_ms()
        paused = self._s.paused_queues
        turn = {q: i for i, q in reversed(list(enumerate(queues))) if q not in paused}
        due: list[MemRow] = []
        later: int | None = None
        crashed: dict[str, str] = {}
        """Lapsed rows whose worker is known dead, with that worker: a crash, not an attempt."""
        for job_id in self._s.live_ids:
            row = self._s.rows[job_id]
            if row.queue not in turn:
                continue
            if row.state == "running":
                if row.lease_expires_at_ms is not None and row.lease_expires_at_ms <= now:
                    verdict = lapse_verdict(self._s.workers.get(row.worker_id or ""), row, now)
                    if verdict != "defer":
                        due.append(row)
                        if verdict == "crash":
                            crashed[row.id] = row.worker_id or ""
            elif row.run_at_ms <= now:
                due.append(row)
            elif later is None or row.run_at_ms < later:
                later = row.run_at_ms
        # the queues in turn: the first due row of each (in the order named), then the second...
        due.sort(key=lambda r: (r.run_at_ms, r.id))
        rank: dict[str, int] = {}
        ranked = []
        for row in due:
            rank[row.queue] = rank.get(row.queue, 0) + 1
            ranked.append((rank[row.queue], turn[row.queue], row))
        ranked.sort(key=lambda t: (t[0], t[1]))
        due = [row for _, _, row in ranked]
        claimed: list[ClaimedJob] = []
        for row in due:
            if len(claimed) >= limit:
                break
            crashed_worker = crashed.get(row.id)
            if crashed_worker is not None:
                row.crashes += 1
                since = row.crashed_at_ms
                progressed = since is not None and any(
                    st.state == "completed" and st.updated_at_ms > since
                    for st in self._s.steps.get(row.id, {}).values()
                )
                # a step completed since the crash before: progress, a new streak
                row.crash_streak = 1 if progressed else row.crash_streak + 1
                row.crashed_at_ms = now
            elif row.state == "running" and row.attempts >= row.max_attempts:
                self._exhaust(row, no_dead_letter, now)
                continue
            else:
                row.attempts += 1
            row.worker_id = worker_id
            row.claim = new_id()
            row.lease_expires_at_ms = now + visibility_timeout_ms
            row.wait_event = None
            self._s.move(row, "running", now)
            claimed.append(
                ClaimedJob(
                    id=row.id,
                    run_id=row.run_id,
                    name=row.name,
                    queue=row.queue,
                    payload=row.row().payload,
                    attempt=row.attempts,
                    max_attempts=row.max_attempts,
                    claim=row.claim,
                    worker_id=worker_id,
                    claimed_at_ms=now,
                    lease_expires_at_ms=row.lease_expires_at_ms,
                    idempotency_key=row.idempotency_key,
                    tenant_id=row.tenant_id,
                    concurrency_key=row.concurrency_key,
                    created_at_ms=row.created_at_ms,
                    trace_context=row.trace_context,
                    crash_streak=row.crash_streak,
                    crashed_worker=crashed_worker,
                )
            )
        if later is not None and len(claimed) < limit:
            self._next_due[worker_id] = later - now
        else:
            self._next_due.pop(worker_id, None)
        # the queues' turns pick the rows; the answer lists them by (run_at, id), as Postgres does
        claimed.sort(key=lambda c: (self._s.rows[c.id].run_at_ms, c.id))
        return claimed

    def take_next_due(self, worker_id: str) -> int | None:
        """``DueReporter``: the ms until the earliest waiting row of ``worker_id``'s last
        claim's queues that falls due later, or ``None``."""
        return self._next_due.pop(worker_id, None)

    async def start_wake(
        self, on_wake: Callable[[str], object], *, queues: Collection[str] | None = None
    ) -> MemoryWake:
        """``QueueWake``: ``on_wake(queue)`` soon after a job of ``queues`` (every queue when
        ``None``) is enqueued, due now or later (a worker's claim then reads when it falls
        due). ``await handle.stop()`` ends it."""
        wake = MemoryWake(on_wake, None if queues is None else frozenset(queues), self._wakes)
        self._wakes.add(wake)
        return wake

    def _announce(self, queue: str) -> None:
        for wake in list(self._wakes):
            wake.hear(queue)

    async def sample_queues(self, queues: Sequence[str]) -> list[QueueSample]:
        """``QueueSampler``: each queue's due backlog and runs in flight, one pass over the live
        rows."""
        names = sample_queue_names(queues)
        now = self._s.now_ms()
        depth = dict.fromkeys(names, 0)
        running = dict.fromkeys(names, 0)
        for job_id in self._s.live_ids:
            row = self._s.rows[job_id]
            if row.queue not in depth:
                continue
            if row.state == "running":
                running[row.queue] += 1
            elif row.run_at_ms <= now:
                depth[row.queue] += 1
        return [
            QueueSample(
                queue=q,
                depth=min(depth[q], DEPTH_SAMPLE_CAP),
                running=min(running[q], DEPTH_SAMPLE_CAP),
                paused=q in self._s.paused_queues,
            )
            for q in names
        ]

    def _exhaust(self, row: MemRow, no_dead_letter: Collection[str], now: int) -> None:
        """A lease lapsed on the row's final attempt: bury it (the claim settles it)."""
        state: JobState = "failed" if row.name in no_dead_letter else "dead"
        lapsed_worker = row.worker_id
        error = XError(
            "X_JOB_LEASE_LOST",
            f"the lease lapsed on the final attempt ({row.attempts} of {row.max_attempts}): "
            f"worker {lapsed_worker} stopped renewing it and no worker settled the run",
        ).to_dict()
        row.last_error_json = freeze(error, what=f"job {row.id} error")
        row.finished_at_ms = now
        row.clear_lease()
        self._s.move(row, state, now)
        self._s.counters.add(row.name, "failed" if state == "failed" else "dead", now)
        self._exhausted.append(
            ExhaustedJob(
                id=row.id,
                name=row.name,
                queue=row.queue,
                payload=row.row().payload,
                tenant_id=row.tenant_id,
                outcome="failed" if state == "failed" else "dead",
                last_error=error,
                run_id=row.run_id,
                attempt=row.attempts,
            )
        )
        log_event(
            "jobs.claim.exhausted",
            job_id=row.id,
            job=row.name,
            queue=row.queue,
            attempts=row.attempts,
            max_attempts=row.max_attempts,
            state=state,
            worker_id=lapsed_worker,
        )

    def take_exhausted(self) -> list[ExhaustedJob]:
        """``ExhaustionReporter``: the rows this driver's claims buried since the last call."""
        taken = list(self._exhausted)
        self._exhausted.clear()
        return taken

    # --- settles (fenced) -----------------------------------------------------------------

    async def ack(
        self,
        job_id: str,
        *,
        worker_id: str,
        claim: str,
        result: Any = None,
        duration_ms: int | None = None,
    ) -> bool:
        row = held(self._s, job_id, worker_id, claim)
        if row is None:
            return False
        self._done(row, _result_json(job_id, result), duration_ms, self._s.now_ms())
        return True

    def _done(self, row: MemRow, result_json: str, duration_ms: int | None, now: int) -> None:
        row.result_json = result_json
        row.finished_at_ms = now
        row.clear_lease()
        self._s.move(row, "done", now)
        self._s.counters.add(row.name, "done", now, duration_ms)

    async def ack_many(self, acks: Sequence[AckRequest], *, worker_id: str) -> list[bool]:
        """``BatchSettler``: many acks of one worker at once, each fenced like ``ack``; answers,
        per input and in order, whether it landed. Every result is checked before any lands."""
        results = [_result_json(a.job_id, a.result) for a in acks]
        now = self._s.now_ms()
        landed: list[bool] = []
        for a, result_json in zip(acks, results, strict=True):
            row = held(self._s, a.job_id, worker_id, a.claim)
            if row is not None:
                self._done(row, result_json, a.duration_ms, now)
            landed.append(row is not None)
        return landed

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
        if outcome not in NACK_OUTCOMES:
            raise XError(
                "X_INVARIANT",
                f"nack of job {job_id}: {outcome!r} is not an outcome",
                fix=f"use one of {', '.join(NACK_OUTCOMES)}",
            )
        row = held(self._s, job_id, worker_id, claim)
        if row is None:
            return False
        error_json = None if error is None else freeze(error, what=f"job {job_id} error")
        now = self._s.now_ms()
        later = run_at_ms if run_at_ms is not None else now + max(0, delay_ms or 0)
        if error_json is not None:
            row.last_error_json = error_json
        row.clear_lease()
        if outcome in ("retry", "dead", "failed"):
            row.crash_streak = 0  # an attempt settled: the crash streak ends
        counted: CounterKind | None = None
        if outcome == "retry":
            row.run_at_ms = later
            self._s.move(row, "ready", now)
            counted = "retried"
        elif outcome in ("dead", "failed"):
            row.finished_at_ms = now
            self._s.move(row, outcome, now)
            counted = outcome
        elif outcome == "suspend":
            row.run_at_ms = later
            row.attempts = max(0, row.attempts - 1)
            row.wait_event = wait_event
            self._s.move(row, "suspended", now)
        else:  # release
            row.run_at_ms = later
            row.attempts = max(0, row.attempts - 1)
            self._s.move(row, "ready", now)
        if counted is not None:
            self._s.counters.add(row.name, counted, now)
        return True

    async def heartbeat(
        self, job_id: str, *, worker_id: str, claim: str, visibility_timeout_ms: int
    ) -> bool:
        _positive(visibility_timeout_ms, "visibility_timeout_ms")
        row = held(self._s, job_id, worker_id, claim)
        if row is None:
            return False
        now = self._s.now_ms()
        row.lease_expires_at_ms = now + visibility_timeout_ms
        row.updated_at_ms = now
        return True

    async def heartbeat_many(
        self,
        leases: Sequence[tuple[str, str]],
        *,
        worker_id: str,
        visibility_timeout_ms: int,
    ) -> list[bool]:
        """``BatchSettler``: renew every ``(job_id, claim)`` lease of one worker, each fenced like
        ``heartbeat``; answers, per input and in order, whether it landed."""
        _positive(visibility_timeout_ms, "visibility_timeout_ms")
        now = self._s.now_ms()
        landed: list[bool] = []
        for job_id, claim in leases:
            row = held(self._s, job_id, worker_id, claim)
            if row is not None:
                row.lease_expires_at_ms = now + visibility_timeout_ms
                row.updated_at_ms = now
            landed.append(row is not None)
        return landed

    async def progress(
        self, job_id: str, *, worker_id: str, claim: str, progress: Mapping[str, Any]
    ) -> bool:
        row = held(self._s, job_id, worker_id, claim)
        if row is None:
            return False
        row.progress_json = freeze(dict(progress), what=f"job {job_id} progress")
        row.updated_at_ms = self._s.now_ms()
        return True

    async def wake_waiters(self, event: str) -> int:
        now = self._s.now_ms()
        woken = 0
        for job_id in self._s.live_ids:
            row = self._s.rows[job_id]
            if row.state == "suspended" and row.wait_event == event:
                row.run_at_ms = min(row.run_at_ms, now)
                row.updated_at_ms = now
                woken += 1
                if self._wakes:
                    self._announce(row.queue)
        return woken

    async def stats(self) -> list[QueueStats]:
        counts: dict[str, dict[str, int]] = {}
        for row in self._s.rows.values():
            per = counts.setdefault(row.queue, {})
            per[row.state] = per.get(row.state, 0) + 1
        return [QueueStats(queue=q, **counts[q]) for q in sorted(counts)]

    async def close(self) -> None:
        """Nothing to hand back. The rows stay readable until the driver is dropped."""

    def event_bus(self) -> MemoryEventBus:
        """Driver extra: this driver's own ``memory_event_bus(driver)`` (the same one every
        call), what a worker with no bus waits on; publish on it, or install it on
        ``EVENT_BUS``."""
        if self._bus is None:
            self._bus = memory_event_bus(self)
        return self._bus

    # --- workers, task fires, purge (driver extras) -----------------------------------------

    async def register_worker(
        self,
        worker_id: str,
        *,
        host: str,
        queues: Sequence[str],
        slots: int | None,
        visibility_timeout_ms: int,
    ) -> WorkerRow:
        _positive(visibility_timeout_ms, "visibility_timeout_ms")
        if not worker_id:
            raise XError("X_INVARIANT", "register_worker: the id is empty", fix="name the worker")
        now = self._s.now_ms()
        self._s.workers[worker_id] = MemWorker(
            id=worker_id,
            host=host,
            started_at_ms=now,
            queues=tuple(queues),
            slots=slots,
            visibility_timeout_ms=visibility_timeout_ms,
            last_heartbeat_ms=now,
        )
        return WorkerRow(
            id=worker_id,
            host=host,
            started_at=from_epoch_ms(now),
            queues=tuple(queues),
            slots=slots,
            in_flight=(),
            last_heartbeat_at=from_epoch_ms(now),
        )

    async def worker_heartbeat(self, worker_id: str, *, in_flight: Sequence[str]) -> bool:
        worker = self._s.workers.get(worker_id)
        if worker is None:
            return False
        worker.last_heartbeat_ms = self._s.now_ms()
        worker.in_flight = tuple(in_flight)
        return True

    async def deregister_worker(self, worker_id: str) -> bool:
        return self._s.workers.pop(worker_id, None) is not None

    async def fire_task(
        self, task: str, occurrence_ms: int, requests: Sequence[EnqueueRequest]
    ) -> bool:
        """The watermark and the occurrence's jobs in one step (no await between them): every
        request is checked first, then the jobs queue only if the watermark moved (never for a
        paused task)."""
        if not task:
            raise XError("X_INVARIANT", "fire_task: the task name is empty", fix="name it")
        prepared = [self._prepare(req) for req in requests]
        if task in self._s.paused_tasks:
            return False
        last = self._s.task_fires.get(task)
        if last is not None and occurrence_ms <= last[0]:
            return False
        now = self._s.now_ms()
        self._s.task_fires[task] = (occurrence_ms, now)
        for req, payload_json in zip(requests, prepared, strict=True):
            self._insert(req, payload_json, now)
        return True

    async def purge(
        self,
        *,
        done_older_than_ms: int = DONE_RETENTION_MS,
        dead_older_than_ms: int = DEAD_RETENTION_MS,
    ) -> int:
        """Delete ``done`` rows finished more than ``done_older_than_ms`` ago and ``failed`` /
        ``dead`` / ``cancelled`` ones past ``dead_older_than_ms`` (with their steps); drop expired
        workers, lease slots and counter buckets. Answers how many jobs were deleted."""
        now = self._s.now_ms()
        doomed = [
            row
            for row in self._s.rows.values()
            if row.state in TERMINAL_STATES
            and (row.finished_at_ms if row.finished_at_ms is not None else row.updated_at_ms)
            <= now - (done_older_than_ms if row.state == "done" else dead_older_than_ms)
        ]
        for row in doomed:
            self._s.delete(row)
        for worker_id in [w.id for w in self._s.workers.values() if w.expired(now)]:
            del self._s.workers[worker_id]
        self.leases.purge()
        self._s.counters.prune(now)
        return len(doomed)


def memory_job_driver(*, clock: Clock | None = None, name: str = "memory") -> MemoryJobDriver:
    """A fresh, empty in-process driver. **Nothing survives a restart.** Pass ``clock`` to pin
    its time (a ``FrozenClock``); without one it reads the ambient ``current_clock()``."""
    return MemoryJobDriver(clock=clock, name=name)
