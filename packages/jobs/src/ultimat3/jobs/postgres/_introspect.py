"""``JobIntrospection`` in SQL: the operator surface (``x jobs``, dashboards, tests) over
``x_jobs`` and its siblings, with the spec's bounds and codes (the memory driver's semantics)."""

from __future__ import annotations

import builtins
from datetime import datetime
from typing import Any, Final

from psycopg import errors as pg_errors

from ultimat3.core import XError, is_lowercase_uuid
from ultimat3.jobs.adapter import (
    DEAD_RETENTION_MS,
    DONE_RETENTION_MS,
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
    job_not_found,
    parse_job_cursor,
)
from ultimat3.jobs.postgres._db import Database
from ultimat3.jobs.postgres._rows import (
    check_text,
    job_detail,
    job_row,
    step_record,
    to_json_text,
    utc,
    worker_row,
)

PURGE_BATCH: Final = 5000
"""Rows one purge statement deletes; the purge loops until a batch comes back short."""


def _aware(when: datetime | None, *, name: str) -> datetime | None:
    if when is None:
        return None
    if when.tzinfo is None or when.utcoffset() is None:
        raise XError(
            "X_INVARIANT",
            f"introspect.list: {name} {when!r} is naive",
            fix="pass an aware datetime, e.g. datetime(2026, 1, 1, tzinfo=UTC)",
        )
    return when


def _filters(queue: str | None, name: str | None, tenant_id: str | None) -> dict[str, str | None]:
    return {"queue": queue, "name": name, "tenant_id": tenant_id}


class PostgresJobIntrospection:
    """Every member of ``JobIntrospection``; each is one statement, or one short transaction
    where a refusal has to be decided between reading the row and moving it."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # --- reading ------------------------------------------------------------------------

    async def show(self, job_id: str) -> JobDetail:
        job_id = job_id_of(job_id)
        rows = await self._db.fetchall("show", {"id": job_id}, what=f"show of job {job_id}")
        if not rows:
            raise job_not_found(job_id)
        return job_detail(rows)

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
    ) -> builtins.list[JobRow]:
        """Newest first (``created_at`` desc, then ``id`` desc); ``created_from`` and
        ``created_to`` are both inclusive."""
        check_page(limit=limit, after=after, before=before, state=state)
        cursor = after if after is not None else before
        cursor_at: datetime | None = None
        cursor_id: str | None = None
        if cursor is not None:
            cursor_at, cursor_id = parse_job_cursor(cursor)
            if not is_lowercase_uuid(cursor_id):
                raise XError(
                    "X_JOB_PAGE_INVALID",
                    f"the cursor {cursor[:80]!r} came from no page of this driver",
                    fix="pass after=job_cursor(last_row) of a page this driver gave you",
                )
        params: dict[str, Any] = {
            **_filters(queue, name, tenant_id),
            "state": state,
            "id_prefix": id_prefix.lower() if id_prefix else None,
            "created_from": _aware(created_from, name="created_from"),
            "created_to": _aware(created_to, name="created_to"),
            "cursor_at": cursor_at,
            "cursor_id": cursor_id,
            "limit": limit,
        }
        if id_prefix is not None and id_prefix != id_prefix.lower():
            return []  # ids are lowercase: an upper-case prefix matches none
        if before is not None:
            rows = await self._db.fetchall("list_before", params, what="introspect.list")
            return [job_row(r) for r in reversed(rows)]
        rows = await self._db.fetchall("list_after", params, what="introspect.list")
        return [job_row(r) for r in rows]

    # --- removing -----------------------------------------------------------------------

    async def remove(self, job_id: str) -> None:
        job_id = job_id_of(job_id)
        row = await self._db.fetchone("remove", {"id": job_id}, what=f"removing job {job_id}")
        if row is None:
            raise job_not_found(job_id)
        if row[0] == "running":
            raise XError(
                "X_JOB_NOT_REMOVABLE",
                f"job {job_id} is running: a running job cannot be removed",
                fix=f"cancel it first (x jobs cancel {job_id}), then remove it",
                meta={"job_id": job_id, "state": row[0]},
            )

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
        row = await self._db.fetchone(
            "remove_many",
            {**_filters(queue, name, tenant_id), "state": state, "limit": MAX_BULK_ROWS},
            what=f"removing {state} jobs",
        )
        assert row is not None
        return BulkResult(affected=int(row[0]), remaining=int(row[1]))

    # --- requeue ------------------------------------------------------------------------

    async def requeue(self, job_id: str, *, from_step: str | None = None) -> JobRow:
        """Back to ``ready`` with attempts 0, due now. Completed steps are kept, so the run
        replays them from storage and resumes at the step that failed; ``from_step`` drops that
        step and every step recorded after it, so they run again."""
        job_id = job_id_of(job_id)
        async with self._db.transaction(f"requeue of job {job_id}") as conn:
            q = self._db.q
            cur = await conn.execute(q["requeue_lock"], {"id": job_id})
            found = await cur.fetchone()
            if found is None:
                raise job_not_found(job_id)
            state, holder, key, job_name = found
            if state not in TERMINAL_STATES:
                raise XError(
                    "X_JOB_NOT_REQUEUEABLE",
                    f"job {job_id} is {state}: only a done, failed, dead or cancelled job can be "
                    "requeued",
                    fix="wait for the job to finish, or cancel it first",
                    meta={"job_id": job_id, "state": state},
                )
            if holder is not None:
                raise XError(
                    "X_JOB_DUPLICATE",
                    f"job {job_id}: its key {key!r} ({job_name}) is held by the live job {holder}",
                    fix=f"let job {holder} settle (or cancel it), then requeue {job_id}",
                    meta={"job_id": job_id, "holder": holder},
                )
            if from_step is not None:
                cur = await conn.execute(q["requeue_step_names"], {"id": job_id})
                names = [r[0] for r in await cur.fetchall()]
                if from_step not in names:
                    raise XError(
                        "X_INVARIANT",
                        f"job {job_id} recorded no step {from_step!r}",
                        fix="pick a step x jobs show "
                        f"{job_id} --json lists: {', '.join(names) or '(none recorded)'}",
                        meta={"job_id": job_id, "step": from_step},
                    )
                await conn.execute(
                    q["requeue_drop_steps"],
                    {"id": job_id, "names": names[names.index(from_step) :]},
                )
            try:
                cur = await conn.execute(q["requeue_move"], {"id": job_id})
            except pg_errors.UniqueViolation as exc:  # a live job took the key meanwhile
                raise XError(
                    "X_JOB_DUPLICATE",
                    f"job {job_id}: its key {key!r} ({job_name}) was taken by a live job while "
                    "it was being requeued",
                    fix=f"let that job settle (or cancel it), then requeue {job_id}",
                    meta={"job_id": job_id},
                ) from exc
            moved = await cur.fetchone()
            assert moved is not None
            return job_row(moved)

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
        params = {**_filters(queue, name, tenant_id), "state": state, "limit": MAX_BULK_ROWS}
        for attempt in range(3):
            try:
                row = await self._db.fetchone(
                    "requeue_many", params, what=f"requeueing {state} jobs"
                )
                break
            except pg_errors.UniqueViolation:
                # a live job took one of the keys meanwhile: the statement changed nothing, and
                # the next one skips that key
                if attempt == 2:
                    raise XError(
                        "X_JOB_DUPLICATE",
                        f"introspect.requeue_many: keys of {state} jobs kept being taken by new "
                        "live jobs while they were requeued",
                        fix="call requeue_many again",
                    ) from None
        assert row is not None
        return BulkResult(affected=int(row[0]), remaining=int(row[1]))

    # --- cancel, promote, resolve ---------------------------------------------------------

    async def cancel(self, job_id: str, reason: str | None = None) -> JobRow:
        """Stop a live job: ``cancelled``, its claim void (the holder's settles answer False),
        ``last_error`` an ``X_ABORTED`` carrying the reason. No counter moves."""
        job_id = job_id_of(job_id)
        error = XError("X_ABORTED", reason or "cancelled by an operator").to_dict()
        row = await self._db.fetchone(
            "cancel",
            {"id": job_id, "error": to_json_text(error, what=f"job {job_id} cancel reason")},
            what=f"cancel of job {job_id}",
        )
        if row is not None:
            return job_row(row)
        state = await self._state(job_id)
        raise XError(
            "X_JOB_NOT_CANCELLABLE",
            f"job {job_id} is {state}: it already ended, there is nothing to stop",
            fix=f"x jobs show {job_id} --json shows how it ended",
            meta={"job_id": job_id, "state": state},
        )

    async def cancel_many(
        self,
        *,
        state: JobState,
        queue: str | None = None,
        name: str | None = None,
        tenant_id: str | None = None,
        reason: str | None = None,
    ) -> BulkResult:
        """Cancels up to ``MAX_BULK_ROWS`` live rows in ``state``, oldest first, in one
        statement; each as ``cancel`` would."""
        check_cancellable_state(state)
        error = XError("X_ABORTED", reason or "cancelled by an operator").to_dict()
        row = await self._db.fetchone(
            "cancel_many",
            {
                **_filters(queue, name, tenant_id),
                "state": state,
                "limit": MAX_BULK_ROWS,
                "error": to_json_text(error, what="the cancel reason"),
            },
            what=f"cancelling {state} jobs",
        )
        assert row is not None
        return BulkResult(affected=int(row[0]), remaining=int(row[1]))

    async def _state(self, job_id: str) -> str:
        row = await self._db.fetchone("job_state", {"id": job_id}, what=f"reading job {job_id}")
        if row is None:
            raise job_not_found(job_id)
        return str(row[0])

    async def promote(self, job_id: str) -> JobRow:
        """Run a job waiting on its ``run_at`` now: ``delayed``, or ``ready`` backing off."""
        job_id = job_id_of(job_id)
        row = await self._db.fetchone("promote", {"id": job_id}, what=f"promote of job {job_id}")
        if row is not None:
            return job_row(row)
        state = await self._state(job_id)
        why = "ready and already due" if state == "ready" else state
        raise XError(
            "X_INVARIANT",
            f"job {job_id} is {why}: only a job waiting on its run_at (delayed, or ready "
            "backing off before a retry) can be promoted",
            fix=f"x jobs show {job_id} --json; a finished job is requeued (x jobs retry)",
            meta={"job_id": job_id, "state": state},
        )

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
        row = await self._db.fetchone(
            "promote_many",
            {**_filters(queue, name, tenant_id), "state": state, "limit": MAX_BULK_ROWS},
            what=f"promoting {state} jobs",
        )
        assert row is not None
        return BulkResult(affected=int(row[0]), remaining=int(row[1]))

    async def resolve_step(
        self, job_id: str, step: str, *, ran: bool, output: Any = None
    ) -> StepRecord | None:
        """Settle a once-step's unknown outcome: ``ran=True`` records it completed with
        ``output``; ``ran=False`` forgets it so the next attempt runs it."""
        job_id = job_id_of(job_id)
        output_json = to_json_text(
            output, what=f"job {job_id} step {step!r} output", code="X_STEP_OUTPUT_UNSERIALIZABLE"
        )
        async with self._db.transaction(f"resolving step {step!r} of job {job_id}") as conn:
            q = self._db.q
            cur = await conn.execute(q["resolve_step_lock"], {"id": job_id, "step": step})
            found = await cur.fetchone()
            if found is None:
                raise job_not_found(job_id)
            state, step_state = found
            if state == "running":
                raise XError(
                    "X_INVARIANT",
                    f"job {job_id} is running: resolve step {step!r} once the run has stopped",
                    fix=f"wait for job {job_id} to settle (or cancel it), then resolve the step",
                    meta={"job_id": job_id, "state": state},
                )
            if step_state is None:
                raise XError(
                    "X_INVARIANT",
                    f"job {job_id} recorded no step {step!r}",
                    fix=f"x jobs show {job_id} --json lists the steps it recorded",
                    meta={"job_id": job_id, "step": step},
                )
            if step_state == "completed":
                raise XError(
                    "X_INVARIANT",
                    f"job {job_id}: step {step!r} is already completed; its outcome is known",
                    fix=f"x jobs retry {job_id} replays it from storage",
                    meta={"job_id": job_id, "step": step},
                )
            if not ran:
                await conn.execute(q["resolve_step_forget"], {"id": job_id, "step": step})
                return None
            cur = await conn.execute(
                q["resolve_step_ran"], {"id": job_id, "step": step, "output": output_json}
            )
            rec = await cur.fetchone()
            assert rec is not None
            return step_record(rec)

    # --- pause ----------------------------------------------------------------------------

    async def pause_queue(self, queue: str) -> None:
        _named(queue, "queue")
        await self._db.rowcount("pause_queue", {"queue": queue}, what=f"pausing queue {queue!r}")

    async def resume_queue(self, queue: str) -> None:
        """Claims read the pause themselves; a resume also announces the queue."""
        _named(queue, "queue")
        await self._db.fetchone("resume_queue", {"queue": queue}, what=f"resuming {queue!r}")

    async def paused_queues(self) -> builtins.list[str]:
        rows = await self._db.fetchall("paused_queues", {}, what="paused queues")
        return [r[0] for r in rows]

    async def pause_task(self, task: str) -> None:
        _named(task, "task")
        await self._db.rowcount("pause_task", {"task": task}, what=f"pausing task {task!r}")

    async def resume_task(self, task: str) -> None:
        _named(task, "task")
        await self._db.rowcount("resume_task", {"task": task}, what=f"resuming task {task!r}")

    async def paused_tasks(self) -> builtins.list[str]:
        rows = await self._db.fetchall("paused_tasks", {}, what="paused tasks")
        return [r[0] for r in rows]

    # --- tasks, workers, counters ---------------------------------------------------------

    async def task_fires(self) -> builtins.list[TaskFire]:
        rows = await self._db.fetchall("task_fires", {"limit": MAX_TASK_FIRES}, what="task fires")
        return [TaskFire(task=r[0], occurrence_ms=int(r[1]), fired_at=utc(r[2])) for r in rows]

    async def workers(self) -> builtins.list[WorkerRow]:
        rows = await self._db.fetchall("workers", {}, what="workers")
        return [worker_row(r) for r in rows]

    async def counters(self, *, job: str | None = None, since_ms: int) -> builtins.list[CounterRow]:
        """One tier's buckets (the finest whose retention covers ``since_ms``) that end after
        ``since_ms``, oldest first, then by job."""
        rows = await self._db.fetchall(
            "counters", {"job": job, "since_ms": since_ms}, what="counters"
        )
        return [
            CounterRow(
                job=r[0],
                bucket_start=utc(r[1]),
                bucket_ms=int(r[2]),
                done=int(r[3]),
                retried=int(r[4]),
                failed=int(r[5]),
                dead=int(r[6]),
                duration_ms=int(r[7]),
            )
            for r in rows
        ]

    async def counter_totals(self, since_ms: int) -> CounterTotals:
        row = await self._db.fetchone(
            "counter_totals", {"since_ms": since_ms}, what="counter totals"
        )
        assert row is not None
        return CounterTotals(
            done=int(row[0]),
            retried=int(row[1]),
            failed=int(row[2]),
            dead=int(row[3]),
            duration_ms=int(row[4]),
        )


def _named(value: str, what: str) -> str:
    check_text(check_name(value, what), what=f"the {what} name")
    return value


async def purge(
    db: Database,
    *,
    done_older_than_ms: int | None = None,
    dead_older_than_ms: int | None = None,
) -> int:
    """The hourly purge: terminal rows past their retention (batched), expired workers, lease
    slots and counter buckets. Answers how many jobs it deleted."""
    done_ms = DONE_RETENTION_MS if done_older_than_ms is None else done_older_than_ms
    dead_ms = DEAD_RETENTION_MS if dead_older_than_ms is None else dead_older_than_ms
    for value, what in ((done_ms, "done_older_than_ms"), (dead_ms, "dead_older_than_ms")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise XError(
                "X_INVARIANT",
                f"purge: {what} {value!r} is not a whole number of milliseconds",
                fix=f"pass {what} as an int >= 0",
            )
    deleted = 0
    while True:
        n = await db.rowcount(
            "purge_jobs",
            {"done_ms": done_ms, "dead_ms": dead_ms, "batch": PURGE_BATCH},
            what="purging finished jobs",
        )
        deleted += n
        if n < PURGE_BATCH:
            break
    await db.rowcount("purge_workers", {}, what="purging expired workers")
    await db.rowcount("purge_leases", {}, what="purging expired lease slots")
    await db.rowcount("purge_counters", {}, what="purging old counter buckets")
    await db.rowcount("purge_events", {"kept_ms": dead_ms}, what="purging old events")
    return deleted
