"""The memory driver's ``JobIntrospection``: the whole operator surface over its dicts."""

from __future__ import annotations

import builtins
from datetime import UTC, datetime, timedelta
from typing import Any

from ultimat3.core import XError, from_epoch_ms
from ultimat3.jobs.adapter import (
    MAX_BULK_ROWS,
    MAX_TASK_FIRES,
    PROMOTABLE_STATES,
    TERMINAL_STATES,
    BulkResult,
    CounterRow,
    CounterTotals,
    JobDetail,
    JobRow,
    JobState,
    StepRecord,
    TaskFire,
    WorkerRow,
    check_cancellable_state,
    check_name,
    check_page,
    check_requeueable_state,
    check_state,
    job_id_of,
    parse_job_cursor,
)

from ._state import MemoryState, MemRow, freeze

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(when: datetime, *, name: str) -> int:
    if when.tzinfo is None or when.utcoffset() is None:
        raise XError(
            "X_INVARIANT",
            f"introspect.list: {name} {when!r} is naive",
            fix="pass an aware datetime, e.g. datetime(2026, 1, 1, tzinfo=UTC)",
        )
    return (when - _EPOCH) // timedelta(microseconds=1)


class MemoryJobIntrospection:
    """Every member of ``JobIntrospection``; each answers from (and changes) the driver's dicts in
    one step, with no await in the middle."""

    def __init__(self, state: MemoryState) -> None:
        self._s = state

    # --- reading ------------------------------------------------------------------------

    def _get(self, job_id: str) -> MemRow:
        row = self._s.rows.get(job_id)
        if row is None:
            raise XError(
                "X_JOB_NOT_FOUND",
                f"no job has the id {job_id!r}",
                fix="check the id with x jobs list --json",
                status=404,
            )
        return row

    async def show(self, job_id: str) -> JobDetail:
        job_id = job_id_of(job_id)
        row = self._get(job_id)
        return row.detail(self._s.steps.get(job_id))

    async def list(
        self,
        *,
        queue: str | None = None,
        name: str | None = None,
        state: JobState | None = None,
        id_prefix: str | None = None,
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        tenant_id: str | None = None,
        limit: int = 50,
        after: str | None = None,
        before: str | None = None,
    ) -> list[JobRow]:
        """Newest first (``created_at`` desc, then ``id`` desc); ``created_from`` and
        ``created_to`` are both inclusive."""
        check_page(limit=limit, after=after, before=before, state=state)
        lo = None if created_from is None else _micros(created_from, name="created_from")
        hi = None if created_to is None else _micros(created_to, name="created_to")
        cursor: tuple[int, str] | None = None
        if after is not None or before is not None:
            at, cursor_id = parse_job_cursor(after if after is not None else before)  # type: ignore[arg-type]
            cursor = (_micros(at, name="cursor"), cursor_id)

        def keep(r: MemRow) -> bool:
            if queue is not None and r.queue != queue:
                return False
            if name is not None and r.name != name:
                return False
            if state is not None and r.state != state:
                return False
            if tenant_id is not None and r.tenant_id != tenant_id:
                return False
            if id_prefix is not None and not r.id.startswith(id_prefix):
                return False
            created = r.created_at_ms * 1000
            if lo is not None and created < lo:
                return False
            if hi is not None and created > hi:
                return False
            if cursor is not None and after is not None and not r.order_key() < cursor:
                return False
            return not (cursor is not None and before is not None and not r.order_key() > cursor)

        matched = [r for r in self._s.rows.values() if keep(r)]
        if before is not None:
            matched.sort(key=MemRow.order_key)
            page = matched[:limit]
            page.reverse()
        else:
            matched.sort(key=MemRow.order_key, reverse=True)
            page = matched[:limit]
        return [r.row() for r in page]

    # --- removing -----------------------------------------------------------------------

    async def remove(self, job_id: str) -> None:
        job_id = job_id_of(job_id)
        row = self._get(job_id)
        if row.state == "running":
            raise XError(
                "X_JOB_NOT_REMOVABLE",
                f"job {job_id} is running: a running job cannot be removed",
                fix=f"cancel it first (x jobs cancel {job_id}), then remove it",
                meta={"job_id": job_id, "state": row.state},
            )
        self._s.delete(row)

    def _matching(
        self, state: JobState, queue: str | None, name: str | None, tenant_id: str | None
    ) -> builtins.list[MemRow]:
        out = [
            r
            for r in self._s.rows.values()
            if r.state == state
            and (queue is None or r.queue == queue)
            and (name is None or r.name == name)
            and (tenant_id is None or r.tenant_id == tenant_id)
        ]
        out.sort(key=MemRow.order_key)
        return out

    async def remove_many(
        self,
        *,
        state: JobState,
        queue: str | None = None,
        name: str | None = None,
        tenant_id: str | None = None,
    ) -> BulkResult:
        """Deletes up to ``MAX_BULK_ROWS`` rows in ``state``, oldest first."""
        check_state(state, what="introspect.remove_many")
        if state == "running":
            raise XError(
                "X_JOB_NOT_REMOVABLE",
                "introspect.remove_many: state 'running' — a running job cannot be removed",
                fix="cancel the running jobs first, then remove them as 'cancelled'",
                meta={"state": state},
            )
        matched = self._matching(state, queue, name, tenant_id)
        for row in matched[:MAX_BULK_ROWS]:
            self._s.delete(row)
        affected = min(len(matched), MAX_BULK_ROWS)
        return BulkResult(affected=affected, remaining=len(matched) - affected)

    # --- requeue ------------------------------------------------------------------------

    def _requeueable(self, row: MemRow) -> None:
        if row.state not in TERMINAL_STATES:
            raise XError(
                "X_JOB_NOT_REQUEUEABLE",
                f"job {row.id} is {row.state}: only a done, failed, dead or cancelled job can be "
                "requeued",
                fix="wait for the job to finish, or cancel it first",
                meta={"job_id": row.id, "state": row.state},
            )
        holder = self._s.live_holder(row.live_key)
        if holder is not None:
            raise XError(
                "X_JOB_DUPLICATE",
                f"job {row.id}: its key {row.idempotency_key!r} ({row.name}) is held by the live "
                f"job {holder.id} ({holder.state})",
                fix=f"let job {holder.id} settle (or cancel it), then requeue {row.id}",
                meta={"job_id": row.id, "holder": holder.id},
            )

    def _put_back(self, row: MemRow, now: int) -> None:
        row.attempts = 0
        row.run_at_ms = now
        row.finished_at_ms = None
        row.result_json = None
        row.wait_event = None
        row.clear_lease()
        self._s.move(row, "ready", now)

    async def requeue(self, job_id: str, *, from_step: str | None = None) -> JobRow:
        """Back to ``ready`` with attempts 0, due now. Completed steps are kept, so the run
        replays them from storage and resumes at the step that failed; ``from_step`` drops that
        step and every step recorded after it, so they run again."""
        job_id = job_id_of(job_id)
        row = self._get(job_id)
        self._requeueable(row)
        if from_step is not None:
            steps = self._s.steps.get(job_id, {})
            if from_step not in steps:
                raise XError(
                    "X_INVARIANT",
                    f"job {job_id} recorded no step {from_step!r}",
                    fix="pick a step x jobs show "
                    f"{job_id} --json lists: {', '.join(steps) or '(none recorded)'}",
                    meta={"job_id": job_id, "step": from_step},
                )
            names = list(steps)
            for dropped in names[names.index(from_step) :]:
                del steps[dropped]
        self._put_back(row, self._s.now_ms())
        return row.row()

    async def requeue_many(
        self,
        *,
        state: JobState,
        queue: str | None = None,
        name: str | None = None,
        tenant_id: str | None = None,
    ) -> BulkResult:
        """Requeues up to ``MAX_BULK_ROWS`` rows it can move, oldest first. A row whose key a live
        job holds stays, and is not counted in ``remaining``."""
        check_requeueable_state(state)
        now = self._s.now_ms()
        moved = 0
        for row in self._matching(state, queue, name, tenant_id):
            if moved >= MAX_BULK_ROWS:
                break
            if self._s.live_holder(row.live_key) is not None:
                continue
            self._put_back(row, now)
            moved += 1
        movable = {
            r.live_key
            for r in self._matching(state, queue, name, tenant_id)
            if self._s.live_holder(r.live_key) is None
        }
        return BulkResult(affected=moved, remaining=len(movable))

    # --- cancel, promote, resolve ---------------------------------------------------------

    async def cancel(self, job_id: str, reason: str | None = None) -> JobRow:
        """Stop a live job: ``cancelled``, its claim void (the holder's settles answer False),
        ``last_error`` an ``X_ABORTED`` carrying the reason. A cancel is not a settlement: no
        counter moves."""
        job_id = job_id_of(job_id)
        row = self._get(job_id)
        if not row.live:
            raise XError(
                "X_JOB_NOT_CANCELLABLE",
                f"job {job_id} is {row.state}: it already ended, there is nothing to stop",
                fix=f"x jobs show {job_id} --json shows how it ended",
                meta={"job_id": job_id, "state": row.state},
            )
        now = self._s.now_ms()
        error = XError("X_ABORTED", reason or "cancelled by an operator").to_dict()
        row.last_error_json = freeze(error, what=f"job {job_id} cancel reason")
        row.finished_at_ms = now
        row.wait_event = None
        row.clear_lease()
        self._s.move(row, "cancelled", now)
        return row.row()

    async def cancel_many(
        self,
        *,
        state: JobState,
        queue: str | None = None,
        name: str | None = None,
        tenant_id: str | None = None,
        reason: str | None = None,
    ) -> BulkResult:
        """Cancels up to ``MAX_BULK_ROWS`` live rows in ``state``, oldest first; each as
        ``cancel`` would."""
        check_cancellable_state(state)
        matched = self._matching(state, queue, name, tenant_id)
        now = self._s.now_ms()
        error = XError("X_ABORTED", reason or "cancelled by an operator").to_dict()
        frozen = freeze(error, what="the cancel reason")
        for row in matched[:MAX_BULK_ROWS]:
            row.last_error_json = frozen
            row.finished_at_ms = now
            row.wait_event = None
            row.clear_lease()
            self._s.move(row, "cancelled", now)
        affected = min(len(matched), MAX_BULK_ROWS)
        return BulkResult(affected=affected, remaining=len(matched) - affected)

    def _promotable(self, row: MemRow, now: int) -> bool:
        return row.state == "delayed" or (row.state == "ready" and row.run_at_ms > now)

    async def promote(self, job_id: str) -> JobRow:
        """Run a job waiting on its ``run_at`` now: ``delayed``, or ``ready`` backing off."""
        job_id = job_id_of(job_id)
        row = self._get(job_id)
        now = self._s.now_ms()
        if not self._promotable(row, now):
            why = "ready and already due" if row.state == "ready" else row.state
            raise XError(
                "X_INVARIANT",
                f"job {job_id} is {why}: only a job waiting on its run_at (delayed, or ready "
                "backing off before a retry) can be promoted",
                fix=f"x jobs show {job_id} --json; a finished job is requeued (x jobs retry)",
                meta={"job_id": job_id, "state": row.state},
            )
        row.run_at_ms = now
        self._s.move(row, "ready", now)
        return row.row()

    async def promote_many(
        self,
        *,
        state: JobState,
        queue: str | None = None,
        name: str | None = None,
        tenant_id: str | None = None,
    ) -> BulkResult:
        check_state(state, what="introspect.promote_many")
        if state not in PROMOTABLE_STATES:
            raise XError(
                "X_INVARIANT",
                f"introspect.promote_many: state {state!r} — only delayed or ready jobs wait on "
                "their run_at",
                fix="pass state='delayed' (or 'ready' for retries backing off)",
                meta={"state": state},
            )
        now = self._s.now_ms()
        matched = [
            r for r in self._matching(state, queue, name, tenant_id) if self._promotable(r, now)
        ]
        for row in matched[:MAX_BULK_ROWS]:
            row.run_at_ms = now
            self._s.move(row, "ready", now)
        affected = min(len(matched), MAX_BULK_ROWS)
        return BulkResult(affected=affected, remaining=len(matched) - affected)

    async def resolve_step(
        self, job_id: str, step: str, *, ran: bool, output: Any = None
    ) -> StepRecord | None:
        job_id = job_id_of(job_id)
        row = self._get(job_id)
        if row.state == "running":
            raise XError(
                "X_INVARIANT",
                f"job {job_id} is running: resolve step {step!r} once the run has stopped",
                fix=f"wait for job {job_id} to settle (or cancel it), then resolve the step",
                meta={"job_id": job_id, "state": row.state},
            )
        steps = self._s.steps.get(job_id, {})
        rec = steps.get(step)
        if rec is None:
            raise XError(
                "X_INVARIANT",
                f"job {job_id} recorded no step {step!r}",
                fix=f"x jobs show {job_id} --json lists the steps it recorded",
                meta={"job_id": job_id, "step": step},
            )
        if rec.state == "completed":
            raise XError(
                "X_INVARIANT",
                f"job {job_id}: step {step!r} is already completed; its outcome is known",
                fix=f"x jobs retry {job_id} replays it from storage",
                meta={"job_id": job_id, "step": step},
            )
        if not ran:
            del steps[step]
            return None
        rec.output_json = freeze(
            output, what=f"job {job_id} step {step!r} output", code="X_STEP_OUTPUT_UNSERIALIZABLE"
        )
        rec.state = "completed"
        rec.executions += 1
        rec.error_json = None
        rec.updated_at_ms = self._s.now_ms()
        return rec.record()

    # --- pause ----------------------------------------------------------------------------

    async def pause_queue(self, queue: str) -> None:
        self._s.paused_queues.add(check_name(queue, "queue"))

    async def resume_queue(self, queue: str) -> None:
        self._s.paused_queues.discard(queue)

    async def paused_queues(self) -> builtins.list[str]:
        return sorted(self._s.paused_queues)

    async def pause_task(self, task: str) -> None:
        self._s.paused_tasks.add(check_name(task, "task"))

    async def resume_task(self, task: str) -> None:
        self._s.paused_tasks.discard(task)

    async def paused_tasks(self) -> builtins.list[str]:
        return sorted(self._s.paused_tasks)

    # --- tasks, workers, counters ---------------------------------------------------------

    async def task_fires(self) -> builtins.list[TaskFire]:
        fires = sorted(self._s.task_fires.items())[:MAX_TASK_FIRES]
        return [
            TaskFire(task=task, occurrence_ms=occ, fired_at=from_epoch_ms(at))
            for task, (occ, at) in fires
        ]

    async def workers(self) -> builtins.list[WorkerRow]:
        now = self._s.now_ms()
        live = [w for w in self._s.workers.values() if not w.expired(now)]
        live.sort(key=lambda w: (w.started_at_ms, w.id))
        return [
            WorkerRow(
                id=w.id,
                host=w.host,
                started_at=from_epoch_ms(w.started_at_ms),
                queues=w.queues,
                slots=w.slots,
                in_flight=w.in_flight,
                last_heartbeat_at=from_epoch_ms(w.last_heartbeat_ms),
            )
            for w in live
        ]

    async def counters(self, *, job: str | None = None, since_ms: int) -> builtins.list[CounterRow]:
        return self._s.counters.rows(job=job, since_ms=since_ms, now_ms=self._s.now_ms())

    async def counter_totals(self, since_ms: int) -> CounterTotals:
        return self._s.counters.totals(since_ms=since_ms, now_ms=self._s.now_ms())
