"""How one attempt settles: every driver write that ends a claim (ack, nack by outcome), the
retry delay, and the verdicts of the unwind. ``_Attempt`` (``_run/execute.py``) mixes it in."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from ultimat3.core import (
    AbortController,
    XError,
    backoff_delay,
    log_event,
    retry_classification,
    to_json_form,
)
from ultimat3.jobs._run.compensation import (
    UnwindEnd,
    compensation_failed,
    forward_attempts,
    mark_unwinding,
)
from ultimat3.jobs._run.outcome import ExecutionSettings, Outcome, RunOutcome
from ultimat3.jobs._run.steps import COMPENSATE_PREFIX, RESERVED_STEP, error_dict
from ultimat3.jobs.adapter import ClaimedJob, NackOutcome

if TYPE_CHECKING:
    from ultimat3.jobs._declare.job import Job
    from ultimat3.jobs._run.ack_batcher import Settler
    from ultimat3.jobs._run.context import ProgressWriter
    from ultimat3.jobs._run.on_settled import SettledOutcome
    from ultimat3.jobs._run.steps import RunState
    from ultimat3.jobs.adapter import JobDriver


_PLAIN: Final = (str, int, bool)


class Settles:
    """The settles of one attempt; every one ends the attempt (``_end``) exactly once."""

    claimed: ClaimedJob
    job: Job[Any, Any] | None
    driver: JobDriver
    settings: ExecutionSettings
    controller: AbortController
    state: RunState | None
    progress: ProgressWriter | None
    settler: Settler
    started: float
    settled: SettledOutcome | None
    """What ``on_settled`` is told, once a settle that ends the run for good was sent."""
    result: Any
    unwinding: bool
    settling: bool
    """Set as a settle is sent: the heartbeat's renewals now race the settle, not the lease."""
    original: dict[str, Any] | None
    """The failure an unwinding attempt undoes."""

    @property
    def final(self) -> bool:
        """The same comparison the runner dead-letters on (the forward attempts only: a
        compensating job's row carries the unwind's margin on top)."""
        return self.claimed.attempt >= forward_attempts(self.job, self.claimed)

    # --- the body's ends ------------------------------------------------------------------------

    async def _complete(self, result: Any) -> RunOutcome:
        claimed = self.claimed
        try:
            # None, a str, an int or a bool is its own JSON form
            stored = result if result is None or type(result) in _PLAIN else to_json_form(result)
        except XError as exc:
            return await self._fail(error_dict(exc), terminal=True)
        if self.state is not None:
            # the body returned: the attempt's steps are over, whether or not the ack lands (a
            # step it left running is refused X_ABORTED, never written behind the ack). A
            # finished attempt is not a cancelled one: ctx.signal stays live.
            self.state.ended = True
        if self.progress is not None:
            await self.progress.flush()
        self.settling = True  # a renewal refused from here on lost to this settle
        landed = await self.settler.ack(
            claimed, result=stored, duration_ms=int((time.monotonic() - self.started) * 1000)
        )
        if landed:
            self.settled, self.result = "completed", result
        else:
            self._unowned("ack")
            self.controller.abort(XError("X_ABORTED", "the attempt's ack did not land"))
        return self._outcome("done", landed=landed)

    async def _suspend(self) -> RunOutcome:
        state = self.state
        assert state is not None and state.suspension is not None
        claimed = self.claimed
        await self._flush_progress()
        self.settling = True  # a renewal refused from here on lost to this settle
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
        due_in = max(0, state.suspension.run_at_ms - state.now_ms())
        return self._outcome("suspend", landed=landed, due_in_ms=due_in)

    async def _release(self, reason: XError | None, *, delay_ms: int | None = None) -> RunOutcome:
        """Hand the run back with the attempt uncounted: a drain, a lost slot, a busy cap."""
        claimed = self.claimed
        await self._flush_progress()
        error = reason.to_dict() if reason is not None else None
        self.settling = True  # a renewal refused from here on lost to this settle
        landed = await self.driver.nack(
            claimed.id,
            worker_id=claimed.worker_id,
            claim=claimed.claim,
            outcome="release",
            error=error,
            delay_ms=delay_ms,
        )
        if not landed:
            self._unowned("release")
        self._end(reason or XError("X_ABORTED", "the run waits for a concurrency slot"))
        return self._outcome("release", landed=landed, error=error, delay_ms=delay_ms)

    async def _refuse(self, reason: XError) -> RunOutcome:
        """``when_busy='fail'`` over a busy key: settled failed, never retried, no dead letter."""
        claimed = self.claimed
        error = reason.to_dict()
        self.settled = "refused"
        self.settling = True  # a renewal refused from here on lost to this settle
        landed = await self.driver.nack(
            claimed.id,
            worker_id=claimed.worker_id,
            claim=claimed.claim,
            outcome="failed",
            error=error,
        )
        if not landed:
            self._unowned("failed")
        self._end(reason)
        return self._outcome("failed", landed=landed, error=error)

    async def _fail(self, error: dict[str, Any], *, terminal: bool = False) -> RunOutcome:
        if self.unwinding:
            return await self._settle_unwind(self._interrupted_unwind(error))
        claimed = self.claimed
        code = error.get("code")
        cls = "terminal" if terminal else retry_classification(code)
        if cls != "terminal" and not self.final:
            return await self._retry(error, self._retry_delay(error))
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
        state = self.state
        job = self.job
        if job is not None and job.compensates and state is not None and state.compensators:
            return await self._begin_unwind(error)
        return await self._bury(error)

    async def _retry(self, error: Mapping[str, Any], delay_ms: int) -> RunOutcome:
        claimed = self.claimed
        await self._flush_progress()
        self.settling = True  # a renewal refused from here on lost to this settle
        landed = await self.driver.nack(
            claimed.id,
            worker_id=claimed.worker_id,
            claim=claimed.claim,
            outcome="retry",
            error=error,
            delay_ms=delay_ms,
        )
        if not landed:
            self._unowned("retry")
        self._end(XError("X_ABORTED", f"the attempt failed ({error.get('code')})"))
        return self._outcome("retry", landed=landed, error=error, delay_ms=delay_ms)

    async def _bury(self, error: Mapping[str, Any]) -> RunOutcome:
        """Settle the run for good: ``dead`` (or ``failed`` for ``dead_letter=False``)."""
        claimed = self.claimed
        job = self.job
        dead_letter = job.retry.dead_letter if job is not None else True
        outcome: NackOutcome = "dead" if dead_letter else "failed"
        self.settled = "dead-lettered" if dead_letter else "dropped"
        await self._flush_progress()
        self.settling = True  # a renewal refused from here on lost to this settle
        landed = await self.driver.nack(
            claimed.id,
            worker_id=claimed.worker_id,
            claim=claimed.claim,
            outcome=outcome,
            error=error,
        )
        if not landed:
            self._unowned(outcome)
        self._end(XError("X_ABORTED", f"the attempt failed ({error.get('code')})"))
        return self._outcome(outcome, landed=landed, error=error)

    # --- the unwind -----------------------------------------------------------------------------

    async def _begin_unwind(self, error: dict[str, Any]) -> RunOutcome:
        """Failed for good with compensators registered: write ``unwinding`` (carrying the
        original error) and hand the row straight back; the next attempt unwinds."""
        state = self.state
        assert state is not None
        try:
            await mark_unwinding(state, error)
        except XError as exc:  # the record did not land: this claim no longer holds the run
            self._end(exc)
            return self._outcome("lost", landed=False, error=exc.to_dict())
        return await self._retry(error, 0)

    def _interrupted_unwind(self, error: Mapping[str, Any]) -> UnwindEnd:
        """An unwinding attempt that failed outside a compensator's own throw (its deadline, a
        step write that did not land): the compensator in flight failed."""
        step = self.state.unwind_step if self.state is not None else None
        if step is not None and step.startswith(COMPENSATE_PREFIX):
            step = step[len(COMPENSATE_PREFIX) :]
        return UnwindEnd(failed_step=step or RESERVED_STEP, error=error)

    async def _settle_unwind(self, end: UnwindEnd) -> RunOutcome:
        """Every compensator ran: buried with the ORIGINAL error. One threw: back while the
        unwind has attempts (the row's error stays the original), then dead with
        ``X_JOB_COMPENSATION_FAILED``. A once-step's unknown outcome stops it at once."""
        claimed = self.claimed
        original = self.original or {}
        if end.failed_step is None:
            return await self._bury(original)
        error = end.error or {}
        if (
            not end.unknown
            and retry_classification(error.get("code")) != "terminal"
            and claimed.attempt < claimed.max_attempts
        ):
            return await self._retry(original, self._retry_delay(error))
        return await self._bury(compensation_failed(claimed, end, original))

    # --- helpers ----------------------------------------------------------------------------

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
        self.settling = True  # a renewal refused from here on lost to this settle
        landed = await self.driver.nack(
            claimed.id,
            worker_id=claimed.worker_id,
            claim=claimed.claim,
            outcome="retry",
            error=error,
            delay_ms=delay,
        )
        return self._outcome("retry", landed=landed, error=error, delay_ms=delay)

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
        due_in_ms: int | None = None,
    ) -> RunOutcome:
        c = self.claimed
        due = (due_in_ms if due_in_ms is not None else delay_ms) if landed else None
        return RunOutcome(c.id, c.name, c.queue, c.attempt, outcome, landed, error, delay_ms, due)
