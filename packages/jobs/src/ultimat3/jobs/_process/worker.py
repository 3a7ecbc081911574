"""``job_worker(...)``: claims due jobs of the queues it serves and runs each through
``execute_job``, the one execution path.

Polling waits ``poll_interval_ms`` while passes find work, doubling up to ``idle_poll_max_ms``
while they do not (to 5 s while the driver's wake is proven); ``wake()`` passes at once. A driver
offering ``start_wake`` (``QueueWake``: the Postgres LISTEN session, Redis pub/sub) has it started
by ``start()`` with ``wake`` and stopped with the worker.
``max_in_flight`` caps the bodies running across every queue (a run whose body ended holds its lease
until its settle lands, bounded by another ``max_in_flight``, so the next claim travels while the
settles do): a pass is ONE claim for every queue, which
the driver serves in turn (the first due row of each queue, then the second, ...: an empty
queue's share goes to the others), starting after the last queue served, so no queue starves.
A claim also reads when its queues' next work falls due, and a run that suspends or retries says
when it does: the worker keeps the earliest such instant and arms one timer for it
(``note_due``), so a delayed job or a ``step.sleep`` starts on time with no faster polling.
A run holds no connection of its own: every statement it sends (a step record, progress, a
renewal) borrows one from the driver's pool and gives it back, so ``max_in_flight`` is
independent of the pool's size. With ``handle_signals=True``
SIGTERM drains: every held run's signal aborts with ``X_DRAINING``; a body that stops is handed
back with the attempt uncounted. ``stop()`` aborts nothing and waits for the work it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal as os_signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ultimat3.core import AbortController, XError, adapter, log_event
from ultimat3.jobs._process.gauges import unwatch_worker, watch_worker
from ultimat3.jobs._process.isolation import CrashIsolation
from ultimat3.jobs._process.sampler import DEFAULT_DEPTH_SAMPLE_INTERVAL_MS, DepthSampler
from ultimat3.jobs._process.settings import (
    UNSET,
    Unset,
    WorkerSettings,
)
from ultimat3.jobs._run.ack_batcher import settler_for
from ultimat3.jobs._run.execute import execute_job, jobs_total_counter
from ultimat3.jobs._run.limiter import ConcurrencyLimiter
from ultimat3.jobs._run.on_settled import SettledOutcome, notify_settled
from ultimat3.jobs._run.outcome import (
    ExecutionSettings,
    RunOutcome,
)
from ultimat3.jobs.adapter import (
    ClaimedJob,
    DueReporter,
    ExhaustedJob,
    ExhaustionReporter,
    declared_paths,
    driver_event_bus,
    driver_leases,
    driver_members_missing,
    driver_redactions,
    driver_wake,
)

if TYPE_CHECKING:
    from ultimat3.jobs._declare.job import Job
    from ultimat3.jobs.adapter import EventBus, JobDriver, WakeHandle

DUE_MARGIN_S = 0.002
"""The due timer fires this long after the instant a claim or a suspension named (the database's
clock and the loop's read a moment apart): on time, not a claim too early."""
CLAIM_GROWTH = 10
"""Without a cap, while the queue holds a backlog of runs that end before the next pass, each
claim asks for twice the last, up to ``CLAIM_GROWTH * claim_batch`` rows."""
WAKE_PROVEN_IDLE_MS = 5000
"""The idle poll's ceiling while the driver's wake is proven (``jobs.wake.live``)."""


@dataclass(frozen=True, slots=True)
class WorkerStats:
    """``worker.stats()``: what this process holds and has settled since it started."""

    worker_id: str
    running: bool
    draining: bool
    queues: tuple[str, ...]
    in_flight: int
    """Runs whose body is running (or about to start): what ``max_in_flight`` caps."""
    max_in_flight: int | None
    passes: int = 0
    claimed: int = 0
    completed: int = 0
    retried: int = 0
    failed: int = 0
    dead_lettered: int = 0
    suspended: int = 0
    released: int = 0
    leases_lost: int = 0
    abandoned: int = 0
    due_wakes: int = 0
    """Passes the due timer started (a delayed job, a sleeping run, a backoff falling due)."""
    settling: int = 0
    """Runs whose body ended and whose settle (an ack, a retry) is still on its way: they hold
    their lease until it lands, and count against ``2 * max_in_flight``, not the cap."""


def _config_error(message: str, fix: str) -> XError:
    return XError("X_CONFIG_INVALID", f"job_worker: {message}", fix=fix)


def _positive_ms(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _config_error(f"{name} {value!r} is not a whole number of ms > 0", f"{name}=1000")
    return value


def job_worker(
    *,
    jobs: Sequence[Job[Any, Any]],
    queues: Sequence[str] | None = None,
    max_in_flight: int | None = None,
    settings: WorkerSettings | None = None,
    poll_interval_ms: int | Unset = UNSET,
    idle_poll_max_ms: int | Unset = UNSET,
    visibility_timeout_ms: int | Unset = UNSET,
    heartbeat_interval_ms: int | Unset | None = UNSET,
    app: Any = None,
    limiter: ConcurrencyLimiter | None = None,
    driver: JobDriver | None = None,
    event_bus: EventBus | None = None,
    worker_id: str | None = None,
    drain_timeout_ms: int | Unset = UNSET,
    abandon_grace_ms: int | Unset = UNSET,
    claim_batch: int | Unset = UNSET,
    handle_signals: bool = False,
    monotonic: Callable[[], float] | None = None,
    rng: random.Random | None = None,
    depth_sample_interval_ms: int | Unset = UNSET,
) -> JobWorker:
    """A worker for ``jobs``. ``driver`` defaults to the installed one (resolved at ``start``);
    ``queues`` to the queues the jobs declare.

    The tuning knobs are one value, ``settings=WorkerSettings(...)`` (every field defaults to
    what it always has); each may also be given as a keyword of its own, as before. ``app`` is
    what ``ctx.app`` answers; ``handle_signals=True`` makes SIGTERM drain the worker (off by
    default: the process's signals belong to its owner — a web server, ``x worker``);
    ``monotonic`` and ``rng`` are test hooks (the run's clock for
    leases and the backoff's randomness)."""
    if settings is not None and not isinstance(settings, WorkerSettings):
        raise _config_error(
            f"settings {settings!r} is not a WorkerSettings",
            "job_worker(jobs=[...], settings=WorkerSettings(poll_interval_ms=100))",
        )
    tuned = (settings if settings is not None else WorkerSettings()).merged(
        {
            "poll_interval_ms": poll_interval_ms,
            "idle_poll_max_ms": idle_poll_max_ms,
            "visibility_timeout_ms": visibility_timeout_ms,
            "heartbeat_interval_ms": heartbeat_interval_ms,
            "drain_timeout_ms": drain_timeout_ms,
            "abandon_grace_ms": abandon_grace_ms,
            "claim_batch": claim_batch,
            "depth_sample_interval_ms": depth_sample_interval_ms,
        }
    )
    return _job_worker(
        jobs=jobs,
        queues=queues,
        max_in_flight=max_in_flight,
        tuned=tuned,
        app=app,
        limiter=limiter,
        driver=driver,
        event_bus=event_bus,
        worker_id=worker_id,
        handle_signals=handle_signals,
        monotonic=monotonic,
        rng=rng,
    )


def _job_worker(
    *,
    jobs: Sequence[Job[Any, Any]],
    queues: Sequence[str] | None,
    max_in_flight: int | None,
    tuned: WorkerSettings,
    app: Any,
    limiter: ConcurrencyLimiter | None,
    driver: JobDriver | None,
    event_bus: EventBus | None,
    worker_id: str | None,
    handle_signals: bool,
    monotonic: Callable[[], float] | None,
    rng: random.Random | None,
) -> JobWorker:
    poll_interval_ms = tuned.poll_interval_ms
    idle_poll_max_ms = tuned.idle_poll_max_ms
    visibility_timeout_ms = tuned.visibility_timeout_ms
    heartbeat_interval_ms = tuned.heartbeat_interval_ms
    drain_timeout_ms = tuned.drain_timeout_ms
    abandon_grace_ms = tuned.abandon_grace_ms
    claim_batch = tuned.claim_batch
    depth_sample_interval_ms = tuned.depth_sample_interval_ms
    from ultimat3.jobs._declare.job import Job

    given: object = jobs
    if isinstance(given, str | bytes) or not isinstance(given, Sequence) or not given:
        raise _config_error("jobs must be a non-empty list of jobs", "job_worker(jobs=[my_job])")
    registry: dict[str, Job[Any, Any]] = {}
    for one in jobs:
        if not isinstance(one, Job):
            raise _config_error(f"{one!r} is not a job", "pass what job() returned")
        if one.name in registry and registry[one.name] is not one:
            raise _config_error(
                f"two jobs are named {one.name!r}", "give every job its own name= (a queue key)"
            )
        registry[one.name] = one
    if queues is None:
        queues = list(dict.fromkeys(j.queue for j in registry.values()))
    if isinstance(queues, str) or not queues or not all(isinstance(q, str) and q for q in queues):
        raise _config_error(f"queues {queues!r} is not a non-empty list of names", "queues=['a']")
    if max_in_flight is not None and (
        isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1
    ):
        raise _config_error(
            f"max_in_flight {max_in_flight!r} is not a whole number >= 1 (0, fractional, NaN "
            "and Infinity are refused)",
            "max_in_flight=8, or leave it unset for no process cap",
        )
    _positive_ms("poll_interval_ms", poll_interval_ms)
    _positive_ms("idle_poll_max_ms", idle_poll_max_ms)
    if idle_poll_max_ms < poll_interval_ms:
        raise _config_error(
            f"idle_poll_max_ms {idle_poll_max_ms} is below poll_interval_ms {poll_interval_ms}",
            "idle_poll_max_ms >= poll_interval_ms",
        )
    _positive_ms("visibility_timeout_ms", visibility_timeout_ms)
    if heartbeat_interval_ms is not None:
        _positive_ms("heartbeat_interval_ms", heartbeat_interval_ms)
        if heartbeat_interval_ms >= visibility_timeout_ms:
            raise _config_error(
                f"heartbeat_interval_ms {heartbeat_interval_ms} is not below "
                f"visibility_timeout_ms {visibility_timeout_ms}: the lease would lapse",
                "leave heartbeat_interval_ms unset (a third of the window)",
            )
    _positive_ms("drain_timeout_ms", drain_timeout_ms)
    _positive_ms("abandon_grace_ms", abandon_grace_ms)
    _positive_ms("claim_batch", claim_batch)
    _positive_ms("depth_sample_interval_ms", depth_sample_interval_ms)
    if limiter is not None and not isinstance(limiter, ConcurrencyLimiter):
        raise _config_error(
            f"limiter {limiter!r} is not a concurrency_limiter",
            "job_worker(limiter=concurrency_limiter(rate_per_tenant=10, window='1s'))",
        )
    settings = ExecutionSettings(
        visibility_timeout_ms=visibility_timeout_ms,
        heartbeat_interval_ms=heartbeat_interval_ms,
        drain_timeout_ms=drain_timeout_ms,
        abandon_grace_ms=abandon_grace_ms,
        monotonic=monotonic,
        rng=rng,
        app=app,
        event_bus=event_bus,
        busy_delay_ms=poll_interval_ms,
        limiter=limiter,
    )
    return JobWorker(
        jobs=registry,
        queues=tuple(queues),
        max_in_flight=max_in_flight,
        poll_interval_ms=poll_interval_ms,
        idle_poll_max_ms=idle_poll_max_ms,
        driver=driver,
        worker_id=worker_id or f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}",
        claim_batch=claim_batch,
        handle_signals=handle_signals,
        settings=settings,
        depth_sample_interval_ms=depth_sample_interval_ms,
    )


class JobWorker:
    """Made by ``job_worker(...)``: ``await start()``, ``await stop()``, ``await drain()``,
    ``stats()``, ``wake()``; ``run_pass()`` / ``wait_idle()`` drive it by hand (the harness)."""

    def __init__(
        self,
        *,
        jobs: dict[str, Job[Any, Any]],
        queues: tuple[str, ...],
        max_in_flight: int | None,
        poll_interval_ms: int,
        idle_poll_max_ms: int,
        driver: JobDriver | None,
        worker_id: str,
        claim_batch: int,
        handle_signals: bool,
        settings: ExecutionSettings,
        depth_sample_interval_ms: int = DEFAULT_DEPTH_SAMPLE_INTERVAL_MS,
    ) -> None:
        self.id = worker_id
        self.jobs = jobs
        self.queues = queues
        self.max_in_flight = max_in_flight
        self._poll_s = poll_interval_ms / 1000
        self._idle_max_s = idle_poll_max_ms / 1000
        self._idle_s = self._poll_s
        self._driver = driver
        self._claim_batch = claim_batch
        self._handle_signals = handle_signals
        self._settings = settings
        self._no_dead_letter = tuple(n for n, j in jobs.items() if not j.retry.dead_letter)
        self._next_queue = 0
        self._runs: dict[str, tuple[asyncio.Task[None], AbortController]] = {}
        self._in_body: set[str] = set()
        """Runs claimed whose body has not ended yet (or never started)."""
        self._hooks: set[asyncio.Task[bool]] = set()
        """``on_settled`` calls for rows a claim buried (``_buried``)."""
        self._claim_size = claim_batch
        self._backlog = False
        """The last pass got all it asked for: more may be due at once."""
        self._caught_up = False
        """Every body claimed had ended at some moment since the last pass."""
        self._woken = False
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        """What ends the loop's wait: the poll, or the due timer when that comes first."""
        self._due_at: float | None = None
        """The loop time at which the earliest work this worker knows of falls due."""
        self._noted_at: float | None = None
        """The earliest due instant noted since the last claim was sent."""
        self._loop_task: asyncio.Task[None] | None = None
        self._beat_task: asyncio.Task[None] | None = None
        """The registry heartbeat, on a timer of its own: a worker at its cap, or idle between
        wakes, still renews its entry every third of a visibility timeout."""
        self._signal_loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._stopping = False
        self._draining = False
        self._counts: dict[str, int] = {}
        self._registered = False
        self._queue_wake: WakeHandle | None = None
        self._isolation = CrashIsolation()
        """Runs with a crash on record: each runs alone (``_process/isolation.py``)."""
        self.depth_sampler = DepthSampler(depth_sample_interval_ms)
        """Behind the ``queue_depth`` / ``queue_demand`` gauges (``_process/sampler.py``)."""

    # --- lifecycle ----------------------------------------------------------------------------

    @property
    def driver(self) -> JobDriver:
        if self._driver is None:
            from ultimat3.jobs.adapter import JOB_DRIVER

            self._driver = adapter(JOB_DRIVER)
        return self._driver

    def check(self) -> None:
        """The refusals ``start()`` makes before claiming anything."""
        driver = self.driver
        missing = driver_members_missing(driver)
        if missing:
            raise XError(
                "X_CONFIG_INVALID",
                f"the job driver {driver!r} lacks {', '.join(missing)}",
                fix="implement every JobDriver member (JobDriverConformance proves a driver)",
            )
        capped = sorted(n for n, j in self.jobs.items() if j.concurrency is not None)
        if capped and driver_leases(driver) is None:
            raise XError(
                "X_JOB_CONCURRENCY_UNENFORCEABLE",
                f"the driver {driver.name!r} has no lease store, and these jobs declare "
                f"concurrency: {', '.join(capped)} — a cap it cannot hold across the fleet",
                fix="use a driver with a LeaseStore (postgres_job_driver(), memory_job_driver()) "
                f"or drop concurrency from {', '.join(capped)}",
                meta={"jobs": capped, "driver": driver.name},
            )

    async def start(self) -> None:
        """Check the configuration, register, and start polling (returns at once)."""
        if self._loop_task is not None:
            return
        self.check()
        self._with_settler()
        self._stopping = False
        self._draining = False
        self._drain_task = None
        self._woken = False
        self._claim_size = self._claim_batch
        await self._register()
        catalog = driver_redactions(self.driver)  # what `x jobs show` redacts (h/redact)
        if catalog is not None and (marked := declared_paths(self.jobs.values())):
            await catalog.declare(marked)
        await self._start_wake()
        watch_worker(self)
        self.depth_sampler.start(self.driver, self.queues)
        self._loop_task = asyncio.ensure_future(self._loop())
        self._beat_task = asyncio.ensure_future(self._beat_loop())
        if self._handle_signals:
            self._install_sigterm()

    async def stop(self) -> None:
        """Stop claiming and wait for every held run to end; aborts nothing. A SIGTERM landing
        meanwhile turns the wait into a drain."""
        self._stopping = True
        self._poke()
        await self._join()

    async def drain(self, *, signal_name: str = "drain()") -> None:
        """What SIGTERM does: stop claiming, abort every held run with ``X_DRAINING``, give the
        bodies the drain budget to stop, and wait."""
        self._stopping = True
        self._draining = True
        self._poke()
        for job_id, (_, controller) in list(self._runs.items()):
            controller.abort(self._drain_reason(job_id, signal_name))
        await self._join()

    def wake(self, queue: str | None = None) -> None:
        """Pass at once: the driver's wake calls it with the queue that has a job due (``'*'``:
        any); a run ending under the cap too. A worker holding no run starts its next capped pass
        at that queue (not behind a claim of each empty queue before it in the rotation)."""
        if queue is not None and not self._runs and queue in self.queues:
            self._next_queue = self.queues.index(queue)
        self._poke()

    def _poke(self) -> None:
        self._woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    @property
    def wake_proven(self) -> bool:
        """Whether the driver's wake is running and known to arrive (the 5 s idle ceiling)."""
        return getattr(self._queue_wake, "proven", False) is True

    def stats(self) -> WorkerStats:
        c = self._counts
        return WorkerStats(
            worker_id=self.id,
            running=self._loop_task is not None and not self._loop_task.done(),
            draining=self._draining,
            queues=self.queues,
            in_flight=len(self._in_body),
            max_in_flight=self.max_in_flight,
            passes=c.get("passes", 0),
            claimed=c.get("claimed", 0),
            completed=c.get("done", 0),
            retried=c.get("retry", 0),
            failed=c.get("failed", 0),
            dead_lettered=c.get("dead", 0),
            suspended=c.get("suspend", 0),
            released=c.get("release", 0),
            leases_lost=c.get("lost", 0),
            abandoned=c.get("abandoned", 0),
            due_wakes=c.get("due_wakes", 0),
            settling=len(self._runs) - len(self._in_body),
        )

    def held(self) -> list[str]:
        """The ids of the jobs this worker holds now (a body running, or its settle on the way):
        what its registry entry names in flight."""
        return list(self._runs)

    def bodies(self) -> int:
        """Runs whose body is running now (``stats().in_flight``, the ``job_worker_in_flight``
        gauge)."""
        return len(self._in_body)

    # --- one pass -----------------------------------------------------------------------------

    def _with_settler(self) -> ExecutionSettings:
        """The settings with this worker's settler (batched when the driver can) and, for a
        wait with no bus passed or installed, the driver's own bus."""
        if self._settings.settler is None:
            driver = self.driver
            self._settings = replace(
                self._settings,
                settler=settler_for(driver),
                fallback_event_bus=self._settings.fallback_event_bus or driver_event_bus(driver),
                body_ended=self._body_ended,
            )
        return self._settings

    def room(self) -> int | None:
        """Claims this worker may make now (``None``: no process cap)."""
        isolated = self._isolation.room(len(self._runs))  # a crashed job runs alone
        if isolated is not None:
            return isolated
        cap = self.max_in_flight
        if cap is None:
            return None
        # the cap counts bodies: a run whose body ended is only its settle in flight (bounded
        # by another ``cap``), so the next claim travels while the settles do
        return max(0, min(cap - len(self._in_body), 2 * cap - len(self._runs)))

    async def run_pass(self) -> int:
        """Claim what is due (within the room) and start running it; answers how many. ONE
        claim statement for every queue served, whatever ``max_in_flight``: the driver serves
        the queues in turn (``claim_order``), starting after the last queue served."""
        if self._stopping:
            return 0
        driver = self.driver
        self._bump("passes")
        room = self.room()
        if room is None:
            limit = self._claim_size
            if self._backlog and (self._caught_up or not self._in_body):
                # a backlog, and the runs end faster than the passes claim: ask for more
                limit = self._claim_size = min(limit * 2, CLAIM_GROWTH * self._claim_batch)
            self._caught_up = False
        elif room <= 0:
            return 0  # at the cap: nothing to claim
        else:
            limit = room
        order = self.claim_order()
        self._noted_at = None
        sent = self._claim_clock()
        claimed = await driver.claim(
            queues=order,
            limit=limit,
            worker_id=self.id,
            visibility_timeout_ms=self._settings.visibility_timeout_ms,
            no_dead_letter=self._no_dead_letter,
        )
        self._buried(driver)
        self._due_from_claim(driver)
        self._backlog = len(claimed) >= limit
        if room is None and not self._backlog:
            self._claim_size = self._claim_batch
        if claimed and room is not None:
            served = {one.queue for one in claimed}
            last = max(i for i, queue in enumerate(order) if queue in served)
            self._next_queue = (self.queues.index(order[last]) + 1) % len(self.queues)
        self._spawn(claimed, sent)
        return len(claimed)

    def claim_order(self) -> list[str]:
        """The queues as this pass claims them: from ``_next_queue`` round (the driver hands out
        the first due row of each in this order, then the second of each, ...)."""
        n = len(self.queues)
        return [self.queues[(self._next_queue + i) % n] for i in range(n)]

    # --- the due timer ------------------------------------------------------------------------

    def _due_from_claim(self, driver: JobDriver) -> None:
        """The claim read its queues' next due instant (``DueReporter``): it replaces what the
        worker knew (the claim saw every queue it serves)."""
        if not isinstance(driver, DueReporter):
            return
        in_ms = driver.take_next_due(self.id)
        self._due_at = self._noted_at  # noted while the claim was out: it may not have seen it
        if in_ms is not None:
            self.note_due(in_ms)

    def note_due(self, in_ms: int) -> None:
        """Work falls due in ``in_ms`` (a claim read it, a run of this worker suspended or was
        retried): keep the earliest such instant and arm the ONE timer for it."""
        loop = asyncio.get_running_loop()
        at = loop.time() + max(0, in_ms) / 1000 + DUE_MARGIN_S
        if self._noted_at is None or at < self._noted_at:
            self._noted_at = at
        if self._due_at is not None and self._due_at <= at:
            return
        self._due_at = at
        waiter, timer = self._waiter, self._timer
        if waiter is not None and not waiter.done() and timer is not None and timer.when() > at:
            timer.cancel()
            self._timer = loop.call_at(at, self._due, waiter)

    def _due(self, waiter: asyncio.Future[None]) -> None:
        self._due_at = None
        self._bump("due_wakes")
        _resolve(waiter)

    async def wait_idle(self) -> None:
        """Wait until this worker holds no run."""
        while self._runs or self._hooks:
            await asyncio.gather(*(t for t, _ in list(self._runs.values())), *list(self._hooks))

    def _buried(self, driver: JobDriver) -> None:
        """The rows the claim just buried (a lease lapsed on the final attempt): count each of a
        job this worker declares and tell its ``on_settled`` ``dead-lettered`` (``dropped`` for a
        ``dead_letter=False`` job, buried ``failed``)."""
        if not isinstance(driver, ExhaustionReporter):
            return
        for row in driver.take_exhausted():
            jobs_total_counter().add(
                1, {"job": row.name, "queue": row.queue, "outcome": row.outcome}
            )
            job = self.jobs.get(row.name)
            if job is None:
                continue
            self._bump("dead" if row.outcome == "dead" else "failed")
            if job.on_settled is not None:
                task = asyncio.ensure_future(self._tell_buried(job, row))
                self._hooks.add(task)
                task.add_done_callback(self._hooks.discard)

    async def _tell_buried(self, job: Job[Any, Any], row: ExhaustedJob) -> bool:
        try:
            value = job.parse(row.payload)
        except Exception:  # a payload that no longer parses: input is None
            value = None
        as_claimed = ClaimedJob(
            id=row.id,
            run_id=row.run_id,
            name=row.name,
            queue=row.queue,
            payload=row.payload,
            attempt=row.attempt,
            max_attempts=row.attempt,
            claim="",
            worker_id=self.id,
            claimed_at_ms=0,
            lease_expires_at_ms=0,
            idempotency_key="",
            tenant_id=row.tenant_id,
        )
        outcome: SettledOutcome = "dead-lettered" if row.outcome == "dead" else "dropped"
        return await notify_settled(
            job, as_claimed, outcome=outcome, input=value, error=row.last_error
        )

    def _claim_clock(self) -> float:
        """The runs' monotonic clock, read as a claim is SENT: a run measures its time since
        the driver's claim stamp from here, so a slow claim never makes a sleep wake early."""
        monotonic = self._settings.monotonic
        return time.monotonic() if monotonic is None else monotonic()

    def _spawn(self, claimed: Sequence[ClaimedJob], sent: float | None = None) -> None:
        if not claimed:
            return
        loop = asyncio.get_running_loop()
        runs, in_body = self._runs, self._in_body
        busy = bool(runs)
        for one in claimed:
            job = self.jobs.get(one.name)
            if not self._isolation.admit(  # a job with a crash on record runs alone, or not here
                one,
                batch=len(claimed),
                busy=busy,
                worker_id=self.id,
                max_crashes=None if job is None else job.max_crashes,
                driver=self.driver,
            ):
                continue
            controller = AbortController()
            if self._draining:
                controller.abort(self._drain_reason(one.id, "drain()"))
            runs[one.id] = (loop.create_task(self._run(one, controller, sent)), controller)
            in_body.add(one.id)
        self._counts["claimed"] = self._counts.get("claimed", 0) + len(claimed)

    def _body_ended(self, claimed: ClaimedJob) -> None:
        """A run's body ended (its settle is still to go out): with a backlog, pass now, so the
        next claim travels while the settles do."""
        in_body = self._in_body
        in_body.discard(claimed.id)
        if not in_body:
            self._caught_up = True
        if self._backlog:
            self._poke()

    async def _run(
        self, claimed: ClaimedJob, controller: AbortController, sent: float | None = None
    ) -> None:
        try:
            outcome: RunOutcome = await execute_job(
                claimed,
                self.jobs.get(claimed.name),
                driver=self.driver,
                settings=self._with_settler(),
                controller=controller,
                claim_sent=sent,
            )
            self._bump(outcome.outcome)
            if outcome.due_in_ms is not None:
                self.note_due(outcome.due_in_ms)
        except Exception as exc:  # a settle that raised: the lease lapses and is re-offered
            log_event(
                "jobs.run.crashed",
                level="error",
                job_id=claimed.id,
                job=claimed.name,
                worker_id=self.id,
                error=f"{type(exc).__name__}: {exc}",
            )
        finally:
            self._runs.pop(claimed.id, None)
            self._in_body.discard(claimed.id)
            self._isolation.release(claimed.id)
            self._poke()

    # --- the loop -----------------------------------------------------------------------------

    async def _loop(self) -> None:
        while not self._stopping:
            room = self.room()
            if room is not None and room <= 0:
                await self._sleep(self._idle_max())
                continue
            try:
                found = await self.run_pass()
            except Exception as exc:
                log_event("jobs.driver.unavailable", worker_id=self.id, error=str(exc))
                found = 0
            if found:
                self._idle_s = self._poll_s
                wait = self._poll_s
            else:
                wait = self._idle_s
                self._idle_s = min(self._idle_s * 2, self._idle_max())
            await self._sleep(wait)

    async def _beat_loop(self) -> None:
        """Renew the registry entry every third of a visibility timeout, whatever the claim
        loop is doing (sleeping at its cap, idle behind a proven wake): an entry that expires
        while its worker lives would make a lapse of one of its runs read as a crash."""
        every = self._settings.visibility_timeout_ms / 3000
        while True:
            await asyncio.sleep(every)
            await self._beat()

    def _idle_max(self) -> float:
        if self.wake_proven:
            return max(self._idle_max_s, WAKE_PROVEN_IDLE_MS / 1000)
        return self._idle_max_s

    async def _sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or until ``wake()`` (or a run ending) pokes the loop."""
        if self._stopping:
            return
        if not self._woken:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            due = self._due_at
            if due is not None and due < loop.time() + seconds:
                self._timer = loop.call_at(due, self._due, waiter)
            else:
                self._timer = loop.call_later(seconds, _resolve, waiter)
            try:
                await waiter
            finally:
                if self._timer is not None:
                    self._timer.cancel()
                self._timer = None
                self._waiter = None
        self._woken = False

    async def _join(self) -> None:
        loop_task = self._loop_task
        if loop_task is not None:
            await loop_task
        await self._stop_wake()
        await self.wait_idle()
        self._loop_task = None
        unwatch_worker(self)
        await self.depth_sampler.stop()
        self._remove_sigterm()
        beat_task, self._beat_task = self._beat_task, None  # beats while the last runs end
        if beat_task is not None:
            beat_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat_task
        await self._deregister()

    # --- the driver's wake (optional: QueueWake) -----------------------------------------------

    async def _start_wake(self) -> None:
        wake = driver_wake(self.driver)
        if wake is None or self._queue_wake is not None:
            return
        try:
            self._queue_wake = await wake.start_wake(self.wake, queues=list(self.queues))
        except Exception as exc:  # the poll is the guarantee: run without the push
            log_event(
                "jobs.wake.lost",
                level="warning",
                worker_id=self.id,
                error=f"{type(exc).__name__}: {exc}",
            )

    async def _stop_wake(self) -> None:
        handle, self._queue_wake = self._queue_wake, None
        if handle is not None:
            try:
                await handle.stop()
            except Exception as exc:
                log_event(
                    "jobs.wake.lost",
                    level="warning",
                    worker_id=self.id,
                    error=f"{type(exc).__name__}: {exc}",
                )

    # --- SIGTERM ------------------------------------------------------------------------------

    def _drain_reason(self, job_id: str, signal_name: str) -> XError:
        return XError(
            "X_DRAINING",
            f"worker {self.id} is draining ({signal_name})",
            meta={"worker_id": self.id, "signal": signal_name, "job_id": job_id},
        )

    def _install_sigterm(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(os_signal.SIGTERM, self._on_sigterm)
        except (NotImplementedError, RuntimeError, ValueError):
            return  # not the main thread, or no signals on this platform
        self._signal_loop = loop

    def _remove_sigterm(self) -> None:
        loop, self._signal_loop = self._signal_loop, None
        if loop is not None and not loop.is_closed():
            loop.remove_signal_handler(os_signal.SIGTERM)

    def _on_sigterm(self) -> None:
        if self._drain_task is None:
            self._drain_task = asyncio.ensure_future(self.drain(signal_name="SIGTERM"))

    # --- the worker registry (optional driver members) ----------------------------------------

    async def _register(self) -> None:
        register = getattr(self.driver, "register_worker", None)
        if register is not None:
            await register(
                self.id,
                host=socket.gethostname(),
                queues=list(self.queues),
                slots=self.max_in_flight,
                visibility_timeout_ms=self._settings.visibility_timeout_ms,
            )
            self._registered = True

    async def _beat(self) -> None:
        beat = getattr(self.driver, "worker_heartbeat", None)
        if not self._registered or beat is None:
            return
        try:
            if not await beat(self.id, in_flight=self.held()):
                await self._register()
        except Exception as exc:
            log_event("jobs.driver.unavailable", worker_id=self.id, error=str(exc))

    async def _deregister(self) -> None:
        deregister = getattr(self.driver, "deregister_worker", None)
        if self._registered and deregister is not None:
            self._registered = False
            with contextlib.suppress(Exception):
                await deregister(self.id)

    def _bump(self, key: str) -> None:
        self._counts[key] = self._counts.get(key, 0) + 1


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
