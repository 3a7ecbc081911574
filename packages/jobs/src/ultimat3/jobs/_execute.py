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
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry.metrics import Counter

from ultimat3.core import (
    AbortController,
    Actor,
    XError,
    backoff_delay,
    current_clock,
    format_duration,
    installed_adapter,
    log_event,
    meter,
    retry_classification,
    to_json_form,
    tracer,
    use_actor,
    use_signal,
    use_tenant,
)

from ._context import JobContext, JobLog, ProgressWriter
from ._heartbeat import Heartbeat
from ._model import ClaimedJob, NackOutcome
from ._outcome import ExecutionSettings, Outcome, RunOutcome
from ._settler import DirectSettler
from ._steps import RunState, Step, StepSuspended, error_dict

if TYPE_CHECKING:
    from ._declare import Job
    from ._ports import EventBus, JobDriver

_jobs_counter: Counter | None = None


def _jobs_total() -> Counter:
    global _jobs_counter
    if _jobs_counter is None:
        _jobs_counter = meter().create_counter(
            "jobs_total", description="attempts settled, by queue and outcome"
        )
    return _jobs_counter


async def execute_job(
    claimed: ClaimedJob,
    job: Job[Any, Any] | None,
    *,
    driver: JobDriver,
    settings: ExecutionSettings | None = None,
    controller: AbortController | None = None,
) -> RunOutcome:
    """Run one claimed attempt of ``job`` to its settle. ``controller`` is the run's: the worker
    aborts it with ``X_DRAINING`` on SIGTERM."""
    run = _Attempt(claimed, job, driver, settings or ExecutionSettings(), controller)
    with tracer().start_as_current_span(
        f"job {claimed.name}",
        attributes={
            "ultimat3.job": claimed.name,
            "ultimat3.job_id": claimed.id,
            "ultimat3.queue": claimed.queue,
            "ultimat3.attempt": claimed.attempt,
        },
    ) as span:
        outcome = await run.execute()
        span.set_attribute("ultimat3.outcome", outcome.outcome)
    _jobs_total().add(1, {"queue": claimed.queue, "outcome": outcome.outcome})
    return outcome


class _Attempt:
    def __init__(
        self,
        claimed: ClaimedJob,
        job: Job[Any, Any] | None,
        driver: JobDriver,
        settings: ExecutionSettings,
        controller: AbortController | None,
    ) -> None:
        self.claimed = claimed
        self.job = job
        self.driver = driver
        self.settings = settings
        self.controller = controller or AbortController()
        self.monotonic = settings.monotonic or time.monotonic
        self.claim_mono = self.monotonic()
        self.started = time.monotonic()
        self.state: RunState | None = None
        self.progress: ProgressWriter | None = None
        self.settler = settings.settler or DirectSettler(driver)

    @property
    def final(self) -> bool:
        # the same comparison the runner dead-letters on
        return self.claimed.attempt >= self.claimed.max_attempts

    async def execute(self) -> RunOutcome:
        claimed = self.claimed
        if self.job is None:
            return await self._unknown_job()
        vt = self.settings.visibility_timeout_ms
        heartbeat = Heartbeat(
            renew=lambda: self.settler.heartbeat(claimed, visibility_timeout_ms=vt),
            claimed=claimed,
            visibility_timeout_ms=self.settings.visibility_timeout_ms,
            interval_ms=self.settings.heartbeat_interval_ms,
            on_lost=self.controller.abort,
        )
        heartbeat.start()
        try:
            return await self._attempt(self.job)
        finally:
            await heartbeat.stop()
            if self.progress is not None:
                self.progress.close()

    async def _attempt(self, job: Job[Any, Any]) -> RunOutcome:
        claimed = self.claimed
        try:
            value = job.parse(claimed.payload)
            self._check_tenant(job, value)
        except XError as exc:
            # a payload that does not parse, or a row queued under another tenant, is refused
            # terminally before the body runs
            return await self._fail(error_dict(exc), terminal=True)
        signal = self.controller.signal
        stored = await self.driver.steps.load(claimed.id)
        self.state = state = RunState(
            job=job,
            claimed=claimed,
            driver=self.driver,
            signal=signal,
            stored=dict(stored),
            monotonic=self.monotonic,
            claim_mono=self.claim_mono,
            event_bus=self.settings.event_bus or _installed_bus(),
        )
        self.progress = ProgressWriter(
            driver=self.driver,
            job_id=claimed.id,
            worker_id=claimed.worker_id,
            claim=claimed.claim,
            monotonic=self.monotonic,
        )
        actor = Actor(id=f"job:{job.name}", org_id=claimed.tenant_id, kind="job")
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
            log=JobLog(job=job.name, job_id=claimed.id, attempt=claimed.attempt),
            app=self.settings.app,
            progress=self.progress,
        )

        async def body() -> Any:
            with use_signal(signal), use_actor(actor), use_tenant(claimed.tenant_id):
                return await job.run(value, Step(state), ctx)

        task: asyncio.Task[Any] = asyncio.ensure_future(body())
        timer = None
        if job.timeout_ms is not None:
            reason = XError(
                "X_JOB_TIMEOUT",
                f"job {job.name!r} ({claimed.id}) passed its timeout of "
                f"{format_duration(job.timeout_ms)}",
                meta={"job_id": claimed.id, "timeout_ms": job.timeout_ms},
            )
            timer = asyncio.get_running_loop().call_later(
                job.timeout_ms / 1000, self.controller.abort, reason
            )
        aborted = asyncio.ensure_future(signal.wait())
        try:
            await asyncio.wait({task, aborted}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        finally:
            if timer is not None:
                timer.cancel()
            if not aborted.done():
                aborted.cancel()
        if task.done():
            return await self._ended(task)
        return await self._cancelled(task)

    # --- a body that ended on its own --------------------------------------------------------

    async def _ended(self, task: asyncio.Task[Any]) -> RunOutcome:
        state = self.state
        assert state is not None
        reason = self.controller.signal.reason
        if task.cancelled():
            return await self._fail(error_dict(XError("X_ABORTED", "the body was cancelled")))
        exc = task.exception()
        if exc is None:
            if state.suspension is not None:  # a body that swallowed its suspension
                return await self._suspend()
            return await self._complete(task.result())
        if isinstance(exc, StepSuspended):
            return await self._suspend()
        if reason is not None:
            # the verdict is read off the signal, not off whatever the body threw
            if reason.code == "X_DRAINING":
                return await self._release(reason)
            if reason.code == "X_JOB_LEASE_LOST":
                return self._outcome("lost", landed=False, error=reason.to_dict())
            return await self._fail(error_dict(reason))
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

    # --- settles -----------------------------------------------------------------------------

    async def _complete(self, result: Any) -> RunOutcome:
        claimed = self.claimed
        try:
            stored = to_json_form(result)
        except XError as exc:
            return await self._fail(error_dict(exc), terminal=True)
        await self._flush_progress()
        landed = await self.settler.ack(
            claimed, result=stored, duration_ms=int((time.monotonic() - self.started) * 1000)
        )
        if landed:
            # a finished attempt is not a cancelled one: ctx.signal stays live, steps refuse
            if self.state is not None:
                self.state.ended = True
        else:
            self._unowned("ack")
            self.controller.abort(XError("X_ABORTED", "the attempt's ack did not land"))
        return self._outcome("done", landed=landed)

    async def _suspend(self) -> RunOutcome:
        state = self.state
        assert state is not None and state.suspension is not None
        claimed = self.claimed
        await self._flush_progress()
        landed = await self.driver.nack(
            claimed.id,
            worker_id=claimed.worker_id,
            claim=claimed.claim,
            outcome="suspend",
            run_at_ms=state.suspension.run_at_ms,
            wait_event=state.suspension.wait_event,
        )
        if not landed:
            self._unowned("suspend")
        self._end(XError("X_ABORTED", "the attempt suspended"))
        return self._outcome("suspend", landed=landed)

    async def _release(self, reason: XError) -> RunOutcome:
        claimed = self.claimed
        await self._flush_progress()
        landed = await self.driver.nack(
            claimed.id,
            worker_id=claimed.worker_id,
            claim=claimed.claim,
            outcome="release",
            error=reason.to_dict(),
        )
        if not landed:
            self._unowned("release")
        self._end(reason)
        return self._outcome("release", landed=landed, error=reason.to_dict())

    async def _fail(self, error: dict[str, Any], *, terminal: bool = False) -> RunOutcome:
        claimed = self.claimed
        job = self.job
        code = error.get("code")
        cls = "terminal" if terminal else retry_classification(code)
        dead_letter = job.retry.dead_letter if job is not None else True
        await self._flush_progress()
        outcome: NackOutcome
        delay_ms: int | None = None
        if cls == "terminal" or self.final:
            outcome = "dead" if dead_letter else "failed"
            meta = dict(error.get("meta") or {})
            meta["attempts"] = claimed.attempt
            if cls == "terminal" and not self.final:
                meta["not_retried"] = f"{code} is classified terminal"
                error = {
                    **error,
                    "message": f"{error.get('message')} — not retried: this code is classified "
                    "terminal",
                }
            error = {**error, "meta": meta}
        else:
            outcome = "retry"
            delay_ms = self._retry_delay(error)
        landed = await self.driver.nack(
            claimed.id,
            worker_id=claimed.worker_id,
            claim=claimed.claim,
            outcome=outcome,
            error=error,
            delay_ms=delay_ms,
        )
        if not landed:
            self._unowned(outcome)
        self._end(XError("X_ABORTED", f"the attempt failed ({code})"))
        return self._outcome(outcome, landed=landed, error=error, delay_ms=delay_ms)

    def _retry_delay(self, error: Mapping[str, Any]) -> int:
        job = self.job
        retry = job.retry if job is not None else None
        max_delay = retry.max_delay_ms if retry is not None else 3_600_000
        code = error.get("code")
        meta = error.get("meta") or {}
        seconds = meta.get("retry_after_seconds") if isinstance(meta, Mapping) else None
        if (
            retry_classification(code) == "retry-after"
            and isinstance(seconds, int | float)
            and not isinstance(seconds, bool)
            and seconds == seconds  # NaN is no delay
        ):
            return min(max(0, int(seconds * 1000)), max_delay)
        if retry is None:
            return backoff_delay(self.claimed.attempt, rng=self.settings.rng)
        return backoff_delay(
            self.claimed.attempt,
            base=retry.delay_ms,
            max_delay=max_delay,
            curve=retry.backoff,
            jitter=retry.jitter,
            rng=self.settings.rng,
        )

    async def _unknown_job(self) -> RunOutcome:
        claimed = self.claimed
        error = XError(
            "X_JOB_DECLARATION_INVALID",
            f"no job named {claimed.name!r} is registered on worker {claimed.worker_id!r}",
            fix=f"pass the job to job_worker(jobs=[...]) on every worker serving queue "
            f"{claimed.queue!r}",
            meta={"job": claimed.name, "queue": claimed.queue},
        ).to_dict()
        # not terminal: during a rolling deploy another worker may know the job
        if self.final:
            return await self._fail(error, terminal=True)
        delay = backoff_delay(claimed.attempt, rng=self.settings.rng)
        landed = await self.driver.nack(
            claimed.id,
            worker_id=claimed.worker_id,
            claim=claimed.claim,
            outcome="retry",
            error=error,
            delay_ms=delay,
        )
        return self._outcome("retry", landed=landed, error=error, delay_ms=delay)

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

    async def _flush_progress(self) -> None:
        if self.progress is not None:
            await self.progress.flush()

    def _end(self, reason: XError) -> None:
        if self.state is not None:
            self.state.ended = True
        self.controller.abort(reason)

    def _unowned(self, what: str) -> None:
        log_event(
            "jobs.settle.unowned",
            job_id=self.claimed.id,
            job=self.claimed.name,
            worker_id=self.claimed.worker_id,
            settle=what,
        )

    def _outcome(
        self,
        outcome: Outcome,
        *,
        landed: bool,
        error: Mapping[str, Any] | None = None,
        delay_ms: int | None = None,
    ) -> RunOutcome:
        c = self.claimed
        return RunOutcome(c.id, c.name, c.queue, c.attempt, outcome, landed, error, delay_ms)


def _installed_bus() -> EventBus | None:
    from .adapter import EVENT_BUS

    return installed_adapter(EVENT_BUS)


def _swallow(task: asyncio.Future[Any]) -> None:
    with contextlib.suppress(BaseException):
        task.exception()
