"""The Redis driver's ``JobIntrospection``: the whole operator surface, one script per call.

``list`` walks a lexicographic index of ``(created_at, id)`` (every row, or the rows of one
state) from the cursor, filtering as it goes; one script run looks at no more than
``LIST_SCAN_BUDGET`` rows, and the driver runs it again from where it stopped until the page is
full, so a rare filter over a big queue never holds the server for long. The bulk operations
(``remove_many``, ``requeue_many``, ``promote_many``) are one script run each over the state's
index: an operator's occasional action, as on Postgres.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from ultimat3.core import XError, from_epoch_ms
from ultimat3.jobs.adapter import (
    MAX_BULK_ROWS,
    MAX_TASK_FIRES,
    PROMOTABLE_STATES,
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

from ._codec import freeze, job_detail, job_row, opt, pairs, step_record, step_records, text
from ._scripts import ScriptRunner

LIST_SCAN_BUDGET: Final = 5000
"""Rows one ``list`` script run looks at before it hands back and is run again."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_MS = 10**16 - 1
Bound = tuple[str, bool]
"""A lexicographic bound on ``"%016d(created_at ms):id"``: ``(text, inclusive)``."""


def _micros(when: datetime, *, name: str) -> int:
    if when.tzinfo is None or when.utcoffset() is None:
        raise XError(
            "X_INVARIANT",
            f"introspect.list: {name} {when!r} is naive",
            fix="pass an aware datetime, e.g. datetime(2026, 1, 1, tzinfo=UTC)",
        )
    return (when - _EPOCH) // timedelta(microseconds=1)


def _pad(ms: int) -> str:
    return f"{min(max(ms, 0), _MAX_MS):016d}"


def _tighter_lower(a: Bound | None, b: Bound) -> Bound:
    if a is None or b[0] > a[0] or (b[0] == a[0] and not b[1]):
        return b
    return a


def _tighter_upper(a: Bound | None, b: Bound) -> Bound:
    if a is None or b[0] < a[0] or (b[0] == a[0] and not b[1]):
        return b
    return a


def _lex(bound: Bound | None, *, upper: bool) -> str:
    if bound is None:
        return "+" if upper else "-"
    return ("[" if bound[1] else "(") + bound[0]


class RedisJobIntrospection:
    """Every member of ``JobIntrospection``; each call is one script run (``list`` may take a
    few, see the module docstring), so each change is atomic."""

    def __init__(self, runner: ScriptRunner) -> None:
        self._r = runner

    # --- reading ------------------------------------------------------------------------

    async def show(self, job_id: str) -> JobDetail:
        job_id = job_id_of(job_id)
        row, steps = await self._r.run("show", job_id, op="show a job")
        if not row:
            raise job_not_found(job_id)
        return job_detail(row, step_records(steps))

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
        lower: Bound | None = None
        upper: Bound | None = None
        if created_from is not None:
            lo_us = _micros(created_from, name="created_from")
            if lo_us > 0:
                lower = _tighter_lower(lower, (_pad(-(-lo_us // 1000)) + ":", True))
        if created_to is not None:
            hi_us = _micros(created_to, name="created_to")
            if hi_us < 0:
                return []
            upper = _tighter_upper(upper, (_pad(hi_us // 1000) + ";", False))
        if after is not None or before is not None:
            at, cursor_id = parse_job_cursor(after if after is not None else before)  # type: ignore[arg-type]
            c_us = _micros(at, name="cursor")
            exact = c_us % 1000 == 0
            if after is not None:
                if c_us < 0:
                    return []
                bound = (_pad(c_us // 1000) + (":" + cursor_id if exact else ";"), False)
                upper = _tighter_upper(upper, bound)
            elif c_us >= 0:
                bound = (
                    (_pad(c_us // 1000) + ":" + cursor_id, False)
                    if exact
                    else (_pad(c_us // 1000 + 1) + ":", True)
                )
                lower = _tighter_lower(lower, bound)
        desc = before is None
        hi, lo = _lex(upper, upper=True), _lex(lower, upper=False)
        rows: builtins.list[JobRow] = []
        while True:
            found, last, done = await self._r.run(
                "list",
                state or "",
                "desc" if desc else "asc",
                hi,
                lo,
                limit - len(rows),
                LIST_SCAN_BUDGET,
                opt(queue),
                opt(name),
                opt(tenant_id),
                opt(id_prefix),
                op="list jobs",
            )
            rows.extend(job_row(flat) for flat in found)
            if len(rows) >= limit or int(done) or not last:
                break
            if desc:
                hi = "(" + text(last)
            else:
                lo = "(" + text(last)
        if not desc:
            rows.reverse()
        return rows

    # --- removing -----------------------------------------------------------------------

    async def remove(self, job_id: str) -> None:
        job_id = job_id_of(job_id)
        status = text(await self._r.run("remove", job_id, op="remove a job"))
        if status == "missing":
            raise job_not_found(job_id)
        if status == "running":
            raise XError(
                "X_JOB_NOT_REMOVABLE",
                f"job {job_id} is running: a running job cannot be removed",
                fix=f"cancel it first (x jobs cancel {job_id}), then remove it",
                meta={"job_id": job_id, "state": "running"},
            )

    async def _bulk(
        self,
        action: str,
        state: JobState,
        queue: str | None,
        name: str | None,
        tenant_id: str | None,
        error_json: str = "",
    ) -> BulkResult:
        affected, remaining = await self._r.run(
            "bulk",
            action,
            state,
            MAX_BULK_ROWS,
            opt(queue),
            opt(name),
            opt(tenant_id),
            error_json,
            op=f"{action} jobs",
        )
        return BulkResult(affected=int(affected), remaining=int(remaining))

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
        return await self._bulk("remove", state, queue, name, tenant_id)

    # --- requeue ------------------------------------------------------------------------

    async def requeue(self, job_id: str, *, from_step: str | None = None) -> JobRow:
        """Back to ``ready`` with attempts 0, due now. Completed steps are kept, so the run
        replays them from storage and resumes at the step that failed; ``from_step`` drops that
        step and every step recorded after it, so they run again."""
        job_id = job_id_of(job_id)
        reply = await self._r.run("requeue", job_id, opt(from_step), op="requeue a job")
        status = text(reply[0])
        if status == "missing":
            raise job_not_found(job_id)
        if status == "state":
            state = text(reply[1])
            raise XError(
                "X_JOB_NOT_REQUEUEABLE",
                f"job {job_id} is {state}: only a done, failed, dead or cancelled job can be "
                "requeued",
                fix="wait for the job to finish, or cancel it first",
                meta={"job_id": job_id, "state": state},
            )
        if status == "held":
            holder, holder_state, job_name, key = (text(v) for v in reply[1:5])
            raise XError(
                "X_JOB_DUPLICATE",
                f"job {job_id}: its key {key!r} ({job_name}) is held by the live job {holder} "
                f"({holder_state})",
                fix=f"let job {holder} settle (or cancel it), then requeue {job_id}",
                meta={"job_id": job_id, "holder": holder},
            )
        if status == "nostep":
            names = sorted(text(v) for v in reply[1:])
            raise XError(
                "X_INVARIANT",
                f"job {job_id} recorded no step {from_step!r}",
                fix=f"pick a step x jobs show {job_id} --json lists: "
                f"{', '.join(names) or '(none recorded)'}",
                meta={"job_id": job_id, "step": from_step},
            )
        return job_row(reply[1])

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
        return await self._bulk("requeue", state, queue, name, tenant_id)

    # --- cancel, promote, resolve ---------------------------------------------------------

    async def cancel(self, job_id: str, reason: str | None = None) -> JobRow:
        """Stop a live job: ``cancelled``, its claim void (the holder's settles answer False),
        ``last_error`` an ``X_ABORTED`` carrying the reason. A cancel is not a settlement: no
        counter moves."""
        job_id = job_id_of(job_id)
        error = XError("X_ABORTED", reason or "cancelled by an operator").to_dict()
        error_json = freeze(error, what=f"job {job_id} cancel reason")
        reply = await self._r.run("cancel", job_id, error_json, op="cancel a job")
        status = text(reply[0])
        if status == "missing":
            raise job_not_found(job_id)
        if status == "ended":
            state = text(reply[1])
            raise XError(
                "X_JOB_NOT_CANCELLABLE",
                f"job {job_id} is {state}: it already ended, there is nothing to stop",
                fix=f"x jobs show {job_id} --json shows how it ended",
                meta={"job_id": job_id, "state": state},
            )
        return job_row(reply[1])

    async def cancel_many(
        self,
        *,
        state: JobState,
        queue: str | None = None,
        name: str | None = None,
        tenant_id: str | None = None,
        reason: str | None = None,
    ) -> BulkResult:
        """Cancels up to ``MAX_BULK_ROWS`` live rows in ``state``, oldest first, in one script
        run; each as ``cancel`` would."""
        check_cancellable_state(state)
        error = XError("X_ABORTED", reason or "cancelled by an operator").to_dict()
        error_json = freeze(error, what="the cancel reason")
        return await self._bulk("cancel", state, queue, name, tenant_id, error_json)

    async def promote(self, job_id: str) -> JobRow:
        """Run a job waiting on its ``run_at`` now: ``delayed``, or ``ready`` backing off."""
        job_id = job_id_of(job_id)
        reply = await self._r.run("promote", job_id, op="promote a job")
        status = text(reply[0])
        if status == "missing":
            raise job_not_found(job_id)
        if status == "no":
            state = text(reply[1])
            why = "ready and already due" if state == "ready" else state
            raise XError(
                "X_INVARIANT",
                f"job {job_id} is {why}: only a job waiting on its run_at (delayed, or ready "
                "backing off before a retry) can be promoted",
                fix=f"x jobs show {job_id} --json; a finished job is requeued (x jobs retry)",
                meta={"job_id": job_id, "state": state},
            )
        return job_row(reply[1])

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
        return await self._bulk("promote", state, queue, name, tenant_id)

    async def resolve_step(
        self, job_id: str, step: str, *, ran: bool, output: Any = None
    ) -> StepRecord | None:
        job_id = job_id_of(job_id)
        output_json: str | None = None
        if ran:
            try:
                output_json = freeze(
                    output,
                    what=f"job {job_id} step {step!r} output",
                    code="X_STEP_OUTPUT_UNSERIALIZABLE",
                )
            except XError:
                # The refusals that come first (no such job, running, no such step) win.
                self._resolved(job_id, step, await self._resolve(job_id, step, "check", None))
                raise
        reply = await self._resolve(job_id, step, "1" if ran else "0", output_json)
        return self._resolved(job_id, step, reply)

    async def _resolve(
        self, job_id: str, step: str, mode: str, output_json: str | None
    ) -> Sequence[Any]:
        reply: Sequence[Any] = await self._r.run(
            "resolve_step", job_id, step, mode, opt(output_json), op="resolve a step"
        )
        return reply

    @staticmethod
    def _resolved(job_id: str, step: str, reply: Sequence[Any]) -> StepRecord | None:
        status = text(reply[0])
        if status == "missing":
            raise job_not_found(job_id)
        if status == "running":
            raise XError(
                "X_INVARIANT",
                f"job {job_id} is running: resolve step {step!r} once the run has stopped",
                fix=f"wait for job {job_id} to settle (or cancel it), then resolve the step",
                meta={"job_id": job_id, "state": "running"},
            )
        if status == "nostep":
            raise XError(
                "X_INVARIANT",
                f"job {job_id} recorded no step {step!r}",
                fix=f"x jobs show {job_id} --json lists the steps it recorded",
                meta={"job_id": job_id, "step": step},
            )
        if status == "completed":
            raise XError(
                "X_INVARIANT",
                f"job {job_id}: step {step!r} is already completed; its outcome is known",
                fix=f"x jobs retry {job_id} replays it from storage",
                meta={"job_id": job_id, "step": step},
            )
        if not reply[1]:
            return None
        return step_record(step, reply[1])[1]

    # --- pause ----------------------------------------------------------------------------

    async def pause_queue(self, queue: str) -> None:
        await self._r.run("pause", "pq", "add", check_name(queue, "queue"), op="pause a queue")

    async def resume_queue(self, queue: str) -> None:
        await self._r.run("pause", "pq", "rem", queue, op="resume a queue")

    async def paused_queues(self) -> builtins.list[str]:
        return sorted(text(v) for v in await self._r.run("pause", "pq", "list", op="read pauses"))

    async def pause_task(self, task: str) -> None:
        await self._r.run("pause", "pt", "add", check_name(task, "task"), op="pause a task")

    async def resume_task(self, task: str) -> None:
        await self._r.run("pause", "pt", "rem", task, op="resume a task")

    async def paused_tasks(self) -> builtins.list[str]:
        return sorted(text(v) for v in await self._r.run("pause", "pt", "list", op="read pauses"))

    # --- tasks, workers, counters ---------------------------------------------------------

    async def task_fires(self) -> builtins.list[TaskFire]:
        fires = sorted(
            (task, text(value))
            for task, value in pairs(await self._r.run("task_fires", op="read task fires")).items()
        )[:MAX_TASK_FIRES]
        out: builtins.list[TaskFire] = []
        for task, value in fires:
            occurrence, _, fired = value.rpartition(":")
            out.append(
                TaskFire(
                    task=task, occurrence_ms=int(occurrence), fired_at=from_epoch_ms(int(fired))
                )
            )
        return out

    async def workers(self) -> builtins.list[WorkerRow]:
        reply = await self._r.run("workers", op="read workers")
        now = int(reply[0])
        rows: builtins.list[tuple[int, str, WorkerRow]] = []
        for entry in reply[1:]:
            worker_id = text(entry[0])
            h = {k: text(v) for k, v in pairs(entry[1]).items()}
            heartbeat, vt = int(h["hb"]), int(h["vt"])
            if heartbeat + vt <= now:
                continue
            started = int(h["started"])
            slots = h.get("slots")
            rows.append(
                (
                    started,
                    worker_id,
                    WorkerRow(
                        id=worker_id,
                        host=h["host"],
                        started_at=from_epoch_ms(started),
                        queues=tuple(json.loads(h["queues"])),
                        slots=None if slots is None else int(slots),
                        in_flight=tuple(json.loads(h["in_flight"])),
                        last_heartbeat_at=from_epoch_ms(heartbeat),
                    ),
                )
            )
        rows.sort(key=lambda r: (r[0], r[1]))
        return [r[2] for r in rows]

    async def counters(self, *, job: str | None = None, since_ms: int) -> builtins.list[CounterRow]:
        """Buckets of the finest tier still covering ``since_ms`` that end after it, oldest
        first (then by job)."""
        if isinstance(since_ms, bool) or not isinstance(since_ms, int):
            raise XError(
                "X_INVARIANT",
                f"counters: since_ms {since_ms!r} is not epoch milliseconds",
                fix="pass since_ms=now_ms - 3_600_000 (the last hour) or another int",
            )
        reply = await self._r.run("counters", since_ms, op="read counters")
        bucket_ms = int(reply[1])
        out: builtins.list[CounterRow] = []
        for i in range(2, len(reply), 2):
            start = int(text(reply[i]))
            per_job: dict[str, dict[str, int]] = {}
            for field, value in pairs(reply[i + 1]).items():
                kind, name = field[0], field[1:]
                if job is not None and name != job:
                    continue
                per_job.setdefault(name, {})[kind] = int(text(value))
            for name, kinds in per_job.items():
                out.append(
                    CounterRow(
                        job=name,
                        bucket_start=from_epoch_ms(start),
                        bucket_ms=bucket_ms,
                        done=kinds.get("d", 0),
                        retried=kinds.get("r", 0),
                        failed=kinds.get("f", 0),
                        dead=kinds.get("x", 0),
                        duration_ms=kinds.get("t", 0),
                    )
                )
        out.sort(key=lambda r: (r.bucket_start, r.job))
        return out

    async def counter_totals(self, since_ms: int) -> CounterTotals:
        done = retried = failed = dead = duration = 0
        for row in await self.counters(since_ms=since_ms):
            done += row.done
            retried += row.retried
            failed += row.failed
            dead += row.dead
            duration += row.duration_ms
        return CounterTotals(
            done=done, retried=retried, failed=failed, dead=dead, duration_ms=duration
        )
