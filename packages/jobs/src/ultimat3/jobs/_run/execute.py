"""``execute_job``: the ONE execution path. It owns the attempt counter's verdicts, the step
store, the timeout and the lease (heartbeat), and settles every claimed run exactly one way.

The order of a deadline is the whole point: ``ctx.signal`` aborts with ``X_JOB_TIMEOUT`` FIRST,
then the attempt is failed (re-queued), then the body's task is cancelled — a body still running
past the re-queue would be a second copy of one job. A drain (``X_DRAINING``) gives the body the
drain budget to stop; a body that stops is handed back with the attempt uncounted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import TYPE_CHECKING, Any

from opentelemetry import trace as otel_trace
from opentelemetry.metrics import Counter

from ultimat3.core import (
    AbortController,
    Actor,
    XError,
    current_clock,
    format_duration,
    log_event,
    meter,
    tracer,
    use_actor,
    use_signal,
    use_tenant,
)
from ultimat3.core import tracer as core_tracer
from ultimat3.jobs._run.ack_batcher import DirectSettler
from ultimat3.jobs._run.attempt_settle import Settles
from ultimat3.jobs._run.compensation import original_error, unwind, unwind_due
from ultimat3.jobs._run.concurrency import SlotHold, key_busy, take_slot, unenforceable
from ultimat3.jobs._run.context import JobContext, ProgressWriter
from ultimat3.jobs._run.crashes import crash_exhausted, crashed_error
from ultimat3.jobs._run.heartbeat import Heartbeat
from ultimat3.jobs._run.limiter import rate_limited
from ultimat3.jobs._run.observe import RunEvent
from ultimat3.jobs._run.on_settled import SettledOutcome, notify_settled
from ultimat3.jobs._run.outcome import ExecutionSettings, RunOutcome
from ultimat3.jobs._run.run_log import job_duration_histogram, log_outcome
from ultimat3.jobs._run.steps import RunState, Step, StepSuspended, error_dict
from ultimat3.jobs._telemetry.spans import end_run_span, run_span
from ultimat3.jobs.adapter import ClaimedJob, driver_leases

if TYPE_CHECKING:
    from ultimat3.jobs._declare.job import Job
    from ultimat3.jobs.adapter import JobDriver

_jobs_counter: Counter | None = None


def jobs_total_counter() -> Counter:
    global _jobs_counter
    if _jobs_counter is None:
        _jobs_counter = meter().create_counter(
            "jobs_total", description="attempts settled, by job, queue and outcome"
        )
    return _jobs_counter


async def execute_job(
    claimed: ClaimedJob,
    job: Job[Any, Any] | None,
    *,
    driver: JobDriver,
    settings: ExecutionSettings | None = None,
    controller: AbortController | None = None,
    claim_sent: float | None = None,
) -> RunOutcome:
    """Run one claimed attempt of ``job`` to its settle. ``controller`` is the run's: the worker
    aborts it with ``X_DRAINING`` on SIGTERM. ``claim_sent``: when the claim was sent, on the
    settings' monotonic clock (default: now) — the run's clock is the driver's claim stamp plus
    the time since, so counting from the send never runs behind the driver's clock."""
    run = _Attempt(claimed, job, driver, settings or ExecutionSettings(), controller, claim_sent)
    spans = _run_tracer()
    if spans is None:  # no SDK installed: the span would be a no-op, so none is made
        outcome = await run.execute()
    else:
        with run_span(spans, claimed) as span:  # CONSUMER, linked to the enqueuing request
            outcome = await run.execute()
            end_run_span(span, outcome)
    labels = {"job": claimed.name, "queue": claimed.queue, "outcome": outcome.outcome}
    jobs_total_counter().add(1, labels)
    took = time.monotonic() - run.started
    job_duration_histogram().record(took, labels)
    log_outcome(claimed, outcome, took)
    return outcome


def _run_tracer() -> otel_trace.Tracer | None:
    """The tracer of the run's span; ``None`` while it is core's and no SDK is installed (the
    OpenTelemetry API alone makes only no-op spans, which cost a run ~5 us for nothing)."""
    if tracer is core_tracer:
        # the global provider, read without get_tracer_provider()'s environment lookup
        provider = getattr(otel_trace, "_TRACER_PROVIDER", _UNREAD)
        if provider is None and not _PROVIDER_FROM_ENV:
            return None
        if provider is _UNREAD and isinstance(
            otel_trace.get_tracer_provider(), otel_trace.ProxyTracerProvider
        ):
            return None
    return tracer()


_UNREAD: Any = object()
_PROVIDER_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
"""An SDK named in the environment is loaded by the first ``get_tracer_provider()``."""


class _Attempt(Settles):
    __slots__ = (
        "_began",
        "_first",
        "_loop",
        "claim_mono",
        "claimed",
        "controller",
        "driver",
        "job",
        "monotonic",
        "original",
        "progress",
        "result",
        "settings",
        "settled",
        "settler",
        "settling",
        "slot",
        "started",
        "state",
        "unwinding",
        "value",
    )

    def __init__(
        self,
        claimed: ClaimedJob,
        job: Job[Any, Any] | None,
        driver: JobDriver,
        settings: ExecutionSettings,
        controller: AbortController | None,
        claim_sent: float | None = None,
    ) -> None:
        self.claimed = claimed
        self.job = job
        self.driver = driver
        self.settings = settings
        self.controller = controller or AbortController()
        self.started = time.monotonic()
        self.monotonic = settings.monotonic or time.monotonic
        if claim_sent is not None:
            self.claim_mono = claim_sent
        else:
            self.claim_mono = self.started if settings.monotonic is None else self.monotonic()
        self.state: RunState | None = None
        self.progress: ProgressWriter | None = None
        self.settler = settings.settler or DirectSettler(driver)
        self.slot: SlotHold | None = None
        self.value: Any = None
        self.settled: SettledOutcome | None = None
        self.result: Any = None
        self.unwinding = False
        self.settling = False
        self.original: dict[str, Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._first: asyncio.Future[None] | None = None
        self._began = False

    async def execute(self) -> RunOutcome:
        claimed = self.claimed
        job = self.job
        if job is None:
            return await self._unknown_job()
        heartbeat = Heartbeat(
            renew=self._renew,
            claimed=claimed,
            visibility_timeout_ms=self.settings.visibility_timeout_ms,
            interval_ms=self.settings.heartbeat_interval_ms,
            on_lost=self.controller.abort,
        )
        observer = self.settings.observer
        if observer is None or not observer.drives_heartbeat:
            heartbeat.start()
        try:
            outcome = await self._attempt(job)
        finally:
            beat = heartbeat.halt()
            if beat is not None:  # a renewal is out: cancel it, and wait for it to stop
                await heartbeat.stop(beat)
            if self.progress is not None:
                self.progress.close()
        if outcome.landed and (self.slot is not None or job.on_settled is not None):
            await self._after_settle(job, outcome)
        return outcome

    def _settle_sent(self) -> bool:
        """Read anew after an await: a settle may have been sent meanwhile."""
        return self.settling

    async def _renew(self) -> bool:
        """The row's lease and, with it, the run's concurrency slot."""
        if self.settling:
            return True
        landed = await self.settler.heartbeat(
            self.claimed, visibility_timeout_ms=self.settings.visibility_timeout_ms
        )
        if not landed and self._settle_sent():
            # the settle landed first (a batched ack can commit while a renewal is in flight):
            # the claim ended by our own hand, nothing was lost
            return True
        if landed and self.slot is not None:
            await self.slot.renew(self.claimed, self.controller.abort)
        return landed

    async def _after_settle(self, job: Job[Any, Any], outcome: RunOutcome) -> None:
        """Once the settle LANDED: give the slot back, then tell ``on_settled`` (a settle that
        did not land tells nobody: another claim owns the run, and its slot)."""
        if not outcome.landed:
            return
        if self.slot is not None:
            await self.slot.release(self.claimed)
        if self.settled is not None and job.on_settled is not None:
            completed = self.settled == "completed"
            await notify_settled(
                job,
                self.claimed,
                outcome=self.settled,
                input=self.value,
                result=self.result if completed else None,
                error=None if completed else outcome.error,
            )

    async def _take_slot(self, job: Job[Any, Any], value: Any) -> RunOutcome | None:
        """The run's concurrency slot, before its body; an outcome when it gets none."""
        leases = driver_leases(self.driver)
        if leases is None:
            return await self._fail(unenforceable(job, self.driver.name).to_dict(), terminal=True)
        try:
            key, hold = await take_slot(
                job, value, self.claimed, leases, ttl_ms=self.settings.visibility_timeout_ms
            )
        except Exception as exc:  # key(input) threw: the ordinary retry path, no body
            return await self._fail(error_dict(exc))
        if hold is not None:
            self.slot = hold
            return None
        if job.when_busy == "fail":
            return await self._refuse(await key_busy(job, self.claimed, key, leases))
        # 'wait': deferred one poll, the attempt handed back uncounted, the body never ran
        return await self._release(None, delay_ms=self.settings.busy_delay_ms)

    async def _attempt(self, job: Job[Any, Any]) -> RunOutcome:
        claimed = self.claimed
        try:
            value = job.parse(claimed.payload)
            self._check_tenant(job, value)
        except XError as exc:
            # a payload that does not parse, or a row queued under another tenant, is refused
            # terminally before the body runs
            return await self._fail(error_dict(exc), terminal=True)
        self.value = value
        if claimed.crash_streak and crash_exhausted(claimed, job.max_crashes):
            # its isolated runs crashed the process max_crashes times: dead, the body not run
            return await self._bury(error_dict(crashed_error(claimed, job.max_crashes)))
        if job.concurrency is not None:
            refused = await self._take_slot(job, value)
            if refused is not None:
                return refused
        if self.settings.limiter is not None:
            wait_ms = self.settings.limiter.try_start(claimed.tenant_id, self.monotonic())
            if wait_ms is not None:
                return await self._release(rate_limited(claimed, wait_ms), delay_ms=wait_ms)
        signal = self.controller.signal
        stored = await self.driver.steps.load(claimed.id)
        settings = self.settings
        self.state = state = RunState(
            job=job,
            claimed=claimed,
            driver=self.driver,
            signal=signal,
            stored=stored if type(stored) is dict else dict(stored),
            monotonic=self.monotonic,
            claim_mono=self.claim_mono,
            event_bus=settings.event_bus,
            fallback_bus=settings.fallback_event_bus,
            observer=settings.observer,
        )
        actor = _actor(job.name, claimed.tenant_id)
        ctx = JobContext(
            signal=signal,
            job_id=claimed.id,
            run_id=claimed.run_id,
            name=job.name,
            attempt=claimed.attempt,
            final_attempt=self.final,
            tenant_id=claimed.tenant_id,
            actor=actor,
            clock=current_clock(),
            app=settings.app,
            progress_writer=self._progress_writer,
        )

        if job.compensates:
            self.unwinding = unwind_due(job, claimed, stored)
            if self.unwinding:
                self.original = original_error(claimed, stored)
        if settings.observer is not None:
            await settings.observer.observe(RunEvent("start", claimed, renew=self._renew))

        loop = asyncio.get_running_loop()
        task: asyncio.Task[Any] = loop.create_task(self._body(job, value, state, ctx, actor))
        timer = None
        if job.timeout_ms is not None:
            reason = XError(
                "X_JOB_TIMEOUT",
                f"job {job.name!r} ({claimed.id}) passed its timeout of "
                f"{format_duration(job.timeout_ms)}",
                meta={"job_id": claimed.id, "timeout_ms": job.timeout_ms},
            )
            timer = loop.call_later(job.timeout_ms / 1000, self.controller.abort, reason)
        # the body ending or the signal aborting, whichever comes first (no task of its own;
        # methods, not closures: a run leaves nothing for the cycle collector). The body's end
        # is told by ``_body``'s own ``finally`` (no done callback: one loop turn a run saved)
        first = self._first = loop.create_future()
        self._loop = loop
        unsubscribe = signal.add_listener(self._aborted)
        try:
            await first
        except asyncio.CancelledError:
            task.cancel()
            if not self._began:  # cancelled before its first step: no finally will run
                task.add_done_callback(self._body_done)
            raise
        finally:
            if timer is not None:
                timer.cancel()
            unsubscribe()
        if not task.done():
            return await self._cancelled(task)
        if (
            not task.cancelled()
            and task.exception() is None
            and not self.unwinding
            and state.suspension is None
        ):
            return await self._complete(task.result())  # the body returned: ack
        return await self._ended(task)

    async def _body(
        self, job: Job[Any, Any], value: Any, state: RunState, ctx: JobContext, actor: Actor
    ) -> Any:
        # the body's task runs in a context of its own (a copy, made at create_task): the
        # ambient signal, actor and tenant are set in it and never reset, since nothing runs in
        # that context after the body (no ``with``: three exits a run saved)
        self._began = True
        try:
            use_signal(ctx.signal).__enter__()
            use_actor(actor).__enter__()
            use_tenant(self.claimed.tenant_id).__enter__()
            if self.unwinding:
                original = self.original
                assert original is not None
                # replay only to re-register the compensators, then undo
                return await unwind(state, lambda: job.run(value, Step(state), ctx), original)
            return await job.run(value, Step(state), ctx)
        finally:
            # the body ended (returned, raised or was cancelled): its task is done once this
            # step of it returns, before the attempt's task runs again (a coroutine closed
            # after its loop is gone tells nobody: nobody waits any more)
            loop = self._loop
            if loop is None or not loop.is_closed():
                self._body_done()

    def _body_done(self, task: asyncio.Future[Any] | None = None) -> None:
        first = self._first
        if first is not None and not first.done():
            first.set_result(None)
        body_ended = self.settings.body_ended
        if body_ended is not None:
            body_ended(self.claimed)

    def _aborted(self, reason: XError) -> None:
        """The run's signal aborted (on any thread): the attempt looks a few loop turns after a
        body awaiting the same signal heard it, so the body reacts to its own cancellation first
        (it may stop, or raise the reason), as when the attempt waited on ``signal.wait()``."""
        loop, first = self._loop, self._first
        if loop is not None and first is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(_resolve_later, loop, first, 2)

    def _progress_writer(self) -> ProgressWriter:
        """The run's progress writer, made on the body's first ``ctx.progress``."""
        if self.progress is None:
            claimed = self.claimed
            self.progress = ProgressWriter(
                driver=self.driver,
                job_id=claimed.id,
                worker_id=claimed.worker_id,
                claim=claimed.claim,
                monotonic=self.monotonic,
            )
        return self.progress

    # --- a body that ended on its own --------------------------------------------------------

    async def _ended(self, task: asyncio.Task[Any]) -> RunOutcome:
        state = self.state
        assert state is not None
        reason = self.controller.signal.reason
        if task.cancelled():
            return await self._fail(error_dict(XError("X_ABORTED", "the body was cancelled")))
        exc = task.exception()
        if exc is None:
            if self.unwinding:
                return await self._settle_unwind(task.result())
            if state.suspension is not None:  # a body that swallowed its suspension
                return await self._suspend()
            return await self._complete(task.result())
        if isinstance(exc, StepSuspended):
            return await self._suspend()
        if reason is not None:
            # the verdict is read off the signal, not off whatever the body threw
            if reason.code == "X_DRAINING":
                return await self._release(reason)
            if reason.code == "X_JOB_SLOT_LOST":
                return await self._release(reason, delay_ms=self.settings.busy_delay_ms)
            if reason.code == "X_JOB_LEASE_LOST":
                return self._outcome("lost", landed=False, error=reason.to_dict())
            return await self._fail(error_dict(reason))
        if isinstance(exc, XError) and exc.code == "X_RATE_LIMITED":
            # throttled, not failed: back at its Retry-After, the attempt uncounted
            ceiling = self.job.retry.max_delay_ms if self.job is not None else 86_400_000
            return await self._release(exc, delay_ms=min(_retry_after_ms(exc), ceiling))
        return await self._fail(error_dict(exc, step=self._step_of(exc)))

    def _step_of(self, exc: BaseException) -> str | None:
        state = self.state
        if state is None or state.failed_step is None:
            return None
        if isinstance(exc, XError) and "step" in exc.meta:
            return None
        return state.failed_step

    # --- a body the signal interrupted ------------------------------------------------------

    async def _cancelled(self, task: asyncio.Task[Any]) -> RunOutcome:
        reason = self.controller.signal.reason
        assert reason is not None
        if reason.code == "X_DRAINING":
            budget = self.settings.drain_timeout_ms / 1000
            await asyncio.wait({task}, timeout=budget)
            if task.done() and not task.cancelled() and task.exception() is None:
                return await self._complete(task.result())  # it finished within the budget
            if not task.done() and not await self._stop(task):
                self._abandoned(task, reason, "did not stop within the drain budget")
                return self._outcome("abandoned", landed=False, error=reason.to_dict())
            return await self._release(reason)
        if reason.code == "X_JOB_LEASE_LOST":
            if not await self._stop(task):
                self._abandoned(task, reason, "still running after its lease was lost")
            return self._outcome("lost", landed=False, error=reason.to_dict())
        if reason.code == "X_JOB_SLOT_LOST":
            # stop the body FIRST: handing the run back while it runs would break the cap
            if not await self._stop(task):
                self._abandoned(task, reason, "still running after its slot was lost")
                return self._outcome("abandoned", landed=False, error=reason.to_dict())
            return await self._release(reason, delay_ms=self.settings.busy_delay_ms)
        # X_JOB_TIMEOUT (or any other abort): fail the attempt first, then cancel the body
        outcome = await self._fail(error_dict(reason))
        if not await self._stop(task):
            self._abandoned(task, reason, "still running after its task was cancelled")
        elif not task.cancelled() and task.exception() is None:
            self._abandoned(task, reason, "ignored the abort and returned")
        return outcome

    async def _stop(self, task: asyncio.Task[Any]) -> bool:
        """Cancel the body's task; answer whether it stopped within the grace."""
        task.cancel()
        await asyncio.wait({task}, timeout=self.settings.abandon_grace_ms / 1000)
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: the verdict was the signal's
        return task.done()

    def _abandoned(self, task: asyncio.Task[Any], reason: XError, how: str) -> None:
        log_event(
            "jobs.timeout.abandoned",
            job_id=self.claimed.id,
            job=self.claimed.name,
            reason=reason.code,
            how=how,
        )
        if not task.done():
            task.add_done_callback(_swallow)

    # --- helpers -----------------------------------------------------------------------------

    def _check_tenant(self, job: Job[Any, Any], value: Any) -> None:
        declared = job.tenant_of(value)
        if declared is not None and declared != self.claimed.tenant_id:
            raise XError(
                "X_JOB_TENANT_MISMATCH",
                f"job {job.name!r} ({self.claimed.id}): the input's tenant is {declared!r} but "
                f"the row was queued for {self.claimed.tenant_id!r}; refused before the body",
                meta={"job_id": self.claimed.id, "tenant": declared},
            )


RATE_LIMITED_DEFAULT_MS = 1000
"""An ``X_RATE_LIMITED`` without ``meta['retry_after_seconds']`` is deferred this long."""


def _retry_after_ms(exc: XError) -> int:
    seconds = exc.meta.get("retry_after_seconds")
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds == seconds:
        return max(0, min(int(seconds * 1000), 86_400_000))
    return RATE_LIMITED_DEFAULT_MS


_ACTORS: dict[tuple[str, str | None], Actor] = {}


def _actor(name: str, tenant_id: str | None) -> Actor:
    """A run's ambient actor, ``Actor(id='job:<name>', org_id=<tenant>, kind='job')``: one per
    job and tenant (an ``Actor`` is frozen, so runs share it)."""
    actor = _ACTORS.get((name, tenant_id))
    if actor is None:
        if len(_ACTORS) >= 4096:
            _ACTORS.clear()
        actor = _ACTORS[(name, tenant_id)] = Actor(id=f"job:{name}", org_id=tenant_id, kind="job")
    return actor


def _resolve(first: asyncio.Future[None]) -> None:
    if not first.done():
        first.set_result(None)


def _resolve_later(
    loop: asyncio.AbstractEventLoop, first: asyncio.Future[None], turns: int
) -> None:
    if turns:
        loop.call_soon(_resolve_later, loop, first, turns - 1)
    else:
        _resolve(first)


def _swallow(task: asyncio.Future[Any]) -> None:
    with contextlib.suppress(BaseException):
        task.exception()
