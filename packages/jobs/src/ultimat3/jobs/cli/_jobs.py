"""``x jobs ...``: the operator surface over ``driver.introspect`` (``JobIntrospection``).

Every command reads or changes one thing through the driver and answers the row it touched, so
``--json`` output is what ``introspect`` returned, through ``to_json_dict``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from ultimat3.core import XError, format_duration, from_epoch_ms, parse_duration
from ultimat3.jobs.adapter import (
    ALL_STATES,
    MAX_JOB_PAGE,
    BackfillRow,
    JobDetail,
    JobRow,
    driver_backfills,
    driver_introspect,
    job_cursor,
    to_json_dict,
)
from ultimat3.jobs.cli import _drain
from ultimat3.jobs.cli._invocation import Commands, Invocation, add_command
from ultimat3.jobs.cli._output import Answer, backfill_table, clip, error_text, table, when

DEFAULT_PAGE = 50
DEFAULT_COUNTER_WINDOW = "1h"


def register(root: Commands, common: argparse.ArgumentParser) -> None:
    jobs = root.add_parser("jobs", help="inspect and operate the job queue", parents=[common])
    group = jobs.add_subparsers(dest="jobs_command", metavar="<command>", required=True)

    def cmd(name: str, summary: str, handler: Any) -> argparse.ArgumentParser:
        return add_command(group, name, summary=summary, handler=handler, common=common)

    p = cmd("list", "list jobs, newest first, one keyset page at a time", cmd_list)
    p.add_argument("--queue", help="only this queue")
    p.add_argument("--name", help="only this job name")
    p.add_argument("--state", choices=ALL_STATES, help="only jobs in this state")
    p.add_argument("--tenant", help="only this tenant's jobs")
    p.add_argument("--id-prefix", help="only ids starting with this")
    p.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_PAGE,
        help=f"rows a page, 1..{MAX_JOB_PAGE} (default {DEFAULT_PAGE})",
    )
    page = p.add_mutually_exclusive_group()
    page.add_argument("--after", metavar="CURSOR", help="the next page: a page's `next` cursor")
    page.add_argument(
        "--before", metavar="CURSOR", help="the previous page: a page's `previous` cursor"
    )

    p = cmd("show", "one job's whole row with its steps", cmd_show)
    p.add_argument("id")

    p = cmd("retry", "requeue a finished job; completed steps replay from storage", cmd_retry)
    p.add_argument("id")
    p.add_argument("--from-step", metavar="STEP", help="run this step and every later one again")

    p = cmd("cancel", "stop a live job (ready, delayed, running, suspended)", cmd_cancel)
    p.add_argument("id")
    p.add_argument("--reason", help="why; stored as the row's last error")

    p = cmd(
        "resolve-step",
        "settle a once-step's unknown outcome, then `x jobs retry <id>`",
        cmd_resolve_step,
    )
    p.add_argument("id")
    p.add_argument("step")
    outcome = p.add_mutually_exclusive_group(required=True)
    outcome.add_argument(
        "--ran", action="store_true", help="the step's effect happened: record it completed"
    )
    outcome.add_argument(
        "--not-ran", action="store_true", help="it did not happen: the next attempt runs it"
    )
    p.add_argument("--output", metavar="JSON", help="with --ran: what the step returned, as JSON")

    p = cmd("promote", "run a delayed (or backing-off) job now", cmd_promote)
    p.add_argument("id")

    p = cmd("pause", "stop every worker claiming from a queue; enqueues still land", cmd_pause)
    p.add_argument("queue")
    p = cmd("resume", "let workers claim from a paused queue again", cmd_resume)
    p.add_argument("queue")
    cmd("paused", "the paused queues and tasks", cmd_paused)

    p = cmd("remove", "delete a job that is not running, with its steps", cmd_remove)
    p.add_argument("id")

    cmd("workers", "the live workers: host, queues, slots, jobs in flight", cmd_workers)
    cmd("stats", "jobs per queue and state", cmd_stats)

    p = cmd("counters", "settle counts over a window: done, retried, failed, dead", cmd_counters)
    p.add_argument("--job", help="only this job name")
    p.add_argument(
        "--since",
        default=DEFAULT_COUNTER_WINDOW,
        help=f"the window back from now, e.g. 15m, 6h, 7d (default {DEFAULT_COUNTER_WINDOW})",
    )

    p = cmd(
        "drain",
        "move the jobs no worker holds from Postgres onto Redis, with their steps",
        _drain.cmd_drain,
    )
    _drain.add_arguments(p)


# --- reading ---------------------------------------------------------------------------------


def _job_table(rows: list[JobRow]) -> str:
    return table(
        ("ID", "NAME", "QUEUE", "STATE", "TRIES", "RUN AT", "KEY"),
        [
            (
                r.id,
                clip(r.name, 32),
                clip(r.queue, 20),
                r.state,
                f"{r.attempts}/{r.max_attempts}",
                when(r.run_at),
                clip(r.idempotency_key, 40),
            )
            for r in rows
        ],
    )


async def _backfills(inv: Invocation) -> list[BackfillRow]:
    ledger = driver_backfills(await inv.driver())
    return [] if ledger is None else await ledger.list(limit=MAX_JOB_PAGE)


async def cmd_list(inv: Invocation) -> Answer:
    a = inv.args
    driver = await inv.driver()
    intro = driver_introspect(driver)
    if intro is None:
        # The spec's degrade: no introspect is a list with nothing in it.
        inv.progress(f"x jobs list: the {driver.name} driver has no introspect; nothing to list")
        empty: dict[str, Any] = {"jobs": [], "next": None, "previous": None, "backfills": []}
        return Answer(empty, "no jobs (the driver has no introspect)")
    filters: dict[str, Any] = {
        "queue": a.queue,
        "name": a.name,
        "state": a.state,
        "id_prefix": a.id_prefix,
        "tenant_id": a.tenant,
    }
    rows = await intro.list(**filters, limit=a.limit, after=a.after, before=a.before)
    next_cursor = previous_cursor = None
    if rows:
        last, first = job_cursor(rows[-1]), job_cursor(rows[0])
        if await intro.list(**filters, limit=1, after=last):
            next_cursor = last
        if await intro.list(**filters, limit=1, before=first):
            previous_cursor = first
    in_flight = [b for b in await _backfills(inv) if b.state == "running"]
    data = {
        "jobs": to_json_dict(rows),
        "next": next_cursor,
        "previous": previous_cursor,
        "backfills": to_json_dict(in_flight),
    }
    lines = [_job_table(rows) if rows else "no jobs match"]
    if next_cursor is not None:
        lines.append(f"next page: x jobs list --after {next_cursor} (same filters)")
    if previous_cursor is not None:
        lines.append(f"previous page: x jobs list --before {previous_cursor} (same filters)")
    if in_flight:
        lines += ["", "backfills in flight:", backfill_table(in_flight)]
    return Answer(data, "\n".join(lines))


def _crashes_text(crashes: int) -> str:
    """Lapses whose worker was known dead (issue 23: a crash is not an attempt)."""
    if not crashes:
        return "0"
    return f"{crashes}  (a worker process died while running it; not counted as attempts)"


def _show_text(job: JobDetail, backfill: BackfillRow | None) -> str:
    fields = [
        ("job", f"{job.id}  ({job.name}, queue {job.queue})"),
        ("run", job.run_id),
        ("state", f"{job.state}  attempt {job.attempts} of {job.max_attempts}"),
        ("crashes", _crashes_text(job.crashes)),
        ("run at", when(job.run_at)),
        ("created", when(job.created_at)),
        ("updated", when(job.updated_at)),
        ("finished", when(job.finished_at)),
        ("key", job.idempotency_key),
        ("tenant", job.tenant_id or "-"),
        ("concurrency key", job.concurrency_key or "-"),
        ("worker", job.worker_id or "-"),
        ("last error", error_text(job.last_error)),
        ("progress", clip(job.progress, 60)),
        ("result", clip(job.result, 60)),
        ("payload", clip(job.payload, 60)),
    ]
    width = max(len(k) for k, _ in fields)
    lines = [f"{k.ljust(width)}  {v}" for k, v in fields]
    trace = job.last_error.get("traceback") if isinstance(job.last_error, Mapping) else None
    if isinstance(trace, str) and trace:
        lines += ["", "last error's traceback (newest frames kept, at most 8 KiB):"]
        lines += [f"  {line}" for line in trace.rstrip("\n").splitlines()]
    if backfill is not None:
        lines.append(
            f"{'backfill'.ljust(width)}  {backfill.name} {backfill.state}, "
            f"{backfill.rows} rows, cursor {clip(backfill.cursor, 40)}"
        )
    if job.steps:
        lines += [
            "",
            table(
                ("STEP", "STATE", "RUNS", "OUTPUT / ERROR"),
                [
                    (
                        clip(name, 40),
                        s.state,
                        str(s.executions),
                        error_text(s.error) if s.error else clip(s.output, 50),
                    )
                    for name, s in job.steps.items()
                ],
            ),
        ]
    else:
        lines += ["", "no steps recorded"]
    return "\n".join(lines)


async def cmd_show(inv: Invocation) -> Answer:
    job = await (await inv.introspect()).show(inv.args.id)
    backfill = next((b for b in await _backfills(inv) if b.job_id == job.id), None)
    data = to_json_dict(job)
    data["backfill"] = None if backfill is None else to_json_dict(backfill)
    data["consumer"] = consumer_of(job)
    text = _show_text(job, backfill)
    if data["consumer"] is not None:
        c = data["consumer"]
        text += (
            f"\n\nconsumer: key {c.get('key')}, last batch {c.get('last_batch_at')}, "
            f"lag {c.get('lag')}"
        )
    return Answer(data, text)


def consumer_of(job: JobDetail) -> dict[str, Any] | None:
    """A consumer() run's ``{key, last_batch_at, lag}``: what its progress note carries."""
    progress = job.progress if isinstance(job.progress, dict) else None
    note = progress.get("note") if progress is not None else None
    if not isinstance(note, str):
        return None
    try:
        parsed = json.loads(note)
    except ValueError:
        return None
    found = parsed.get("consumer") if isinstance(parsed, dict) else None
    return found if isinstance(found, dict) else None


# --- changing one job --------------------------------------------------------------------------


async def cmd_retry(inv: Invocation) -> Answer:
    a = inv.args
    row = await (await inv.introspect()).requeue(a.id, from_step=a.from_step)
    rerun = f", steps from {a.from_step!r} on run again" if a.from_step else ""
    return Answer(
        to_json_dict(row),
        f"job {row.id} requeued: {row.state}, due {when(row.run_at)}{rerun}; "
        f"completed steps replay from storage\nfollow it: x jobs show {row.id}",
    )


async def cmd_cancel(inv: Invocation) -> Answer:
    row = await (await inv.introspect()).cancel(inv.args.id, inv.args.reason)
    return Answer(to_json_dict(row), f"job {row.id} cancelled ({error_text(row.last_error)})")


def _step_output(a: argparse.Namespace) -> Any:
    """The ``--output`` JSON; ``X_INVARIANT`` naming the flag for anything else."""
    if a.not_ran:
        if a.output is not None:
            raise XError(
                "X_INVARIANT",
                "--output goes with --ran: a step that did not run returned nothing",
                fix=f"x jobs resolve-step {a.id} {a.step} --not-ran",
            )
        return None
    if a.output is None:
        raise XError(
            "X_INVARIANT",
            "--ran needs --output: the JSON the step returned, which replays read back",
            fix=f"x jobs resolve-step {a.id} {a.step} --ran --output 'null' when it returned "
            "nothing",
        )
    try:
        return json.loads(a.output)
    except json.JSONDecodeError as exc:
        raise XError(
            "X_INVARIANT",
            f"--output is not JSON: {exc.msg} at position {exc.pos}",
            fix="""quote it for the shell: --output '{"id": "ch_123"}' or --output '"text"'""",
            meta={"flag": "--output"},
        ) from exc


async def cmd_resolve_step(inv: Invocation) -> Answer:
    a = inv.args
    output = _step_output(a)
    record = await (await inv.introspect()).resolve_step(a.id, a.step, ran=a.ran, output=output)
    data = {
        "job_id": a.id,
        "step": a.step,
        "ran": bool(a.ran),
        "record": to_json_dict(record),
    }
    said = "recorded as ran (completed)" if a.ran else "forgotten: the next attempt runs it"
    return Answer(data, f"step {a.step!r} of job {a.id} {said}\nthen: x jobs retry {a.id}")


async def cmd_promote(inv: Invocation) -> Answer:
    row = await (await inv.introspect()).promote(inv.args.id)
    return Answer(to_json_dict(row), f"job {row.id} promoted: {row.state}, due now")


async def cmd_remove(inv: Invocation) -> Answer:
    job_id = inv.args.id
    await (await inv.introspect()).remove(job_id)
    return Answer({"removed": job_id}, f"job {job_id} removed with its steps")


# --- queues ------------------------------------------------------------------------------------


async def cmd_pause(inv: Invocation) -> Answer:
    queue = inv.args.queue
    await (await inv.introspect()).pause_queue(queue)
    return Answer(
        {"queue": queue, "paused": True},
        f"queue {queue} paused: no worker claims from it until x jobs resume {queue}",
    )


async def cmd_resume(inv: Invocation) -> Answer:
    queue = inv.args.queue
    await (await inv.introspect()).resume_queue(queue)
    return Answer({"queue": queue, "paused": False}, f"queue {queue} resumed")


async def cmd_paused(inv: Invocation) -> Answer:
    intro = await inv.introspect()
    queues, tasks = await intro.paused_queues(), await intro.paused_tasks()
    text = [
        "paused queues: " + (", ".join(queues) or "none"),
        "paused tasks: " + (", ".join(tasks) or "none"),
    ]
    return Answer({"queues": queues, "tasks": tasks}, "\n".join(text))


async def cmd_workers(inv: Invocation) -> Answer:
    rows = await (await inv.introspect()).workers()
    text = (
        table(
            ("ID", "HOST", "STARTED", "QUEUES", "SLOTS", "IN FLIGHT", "LAST HEARTBEAT"),
            [
                (
                    w.id,
                    clip(w.host, 24),
                    when(w.started_at),
                    clip(",".join(w.queues), 30),
                    "-" if w.slots is None else str(w.slots),
                    str(len(w.in_flight)),
                    when(w.last_heartbeat_at),
                )
                for w in rows
            ],
        )
        if rows
        else "no live workers"
    )
    return Answer({"workers": to_json_dict(rows)}, text)


async def cmd_stats(inv: Invocation) -> Answer:
    driver = await inv.driver()
    stats = await driver.stats()
    intro = driver_introspect(driver)
    paused = None if intro is None else set(await intro.paused_queues())
    data = []
    for s in stats:
        row = to_json_dict(s)
        if paused is not None:
            row["paused"] = s.queue in paused
        data.append(row)
    states = ALL_STATES
    text = (
        table(
            ("QUEUE", *(st.upper() for st in states), "PAUSED"),
            [
                (
                    s.queue,
                    *(str(getattr(s, st)) for st in states),
                    "-" if paused is None else ("yes" if s.queue in paused else "no"),
                )
                for s in stats
            ],
        )
        if stats
        else "no queues hold jobs"
    )
    return Answer({"queues": data}, text)


async def cmd_counters(inv: Invocation) -> Answer:
    a = inv.args
    window_ms = parse_duration(a.since, name="--since")
    intro = await inv.introspect()
    since_ms = await (await inv.driver()).now_ms() - window_ms
    rows = await intro.counters(job=a.job, since_ms=since_ms)
    if a.job is None:
        totals = to_json_dict(await intro.counter_totals(since_ms))
    else:
        totals = {
            k: sum(getattr(r, k) for r in rows)
            for k in ("done", "retried", "failed", "dead", "duration_ms")
        }
    data = {
        "since": from_epoch_ms(since_ms).isoformat(),
        "window_ms": window_ms,
        "job": a.job,
        "rows": to_json_dict(rows),
        "totals": totals,
    }
    body = (
        table(
            ("BUCKET", "SIZE", "JOB", "DONE", "RETRIED", "FAILED", "DEAD", "DURATION MS"),
            [
                (
                    when(r.bucket_start),
                    format_duration(r.bucket_ms),
                    clip(r.job, 32),
                    str(r.done),
                    str(r.retried),
                    str(r.failed),
                    str(r.dead),
                    str(r.duration_ms),
                )
                for r in rows
            ],
        )
        if rows
        else "nothing settled in the window"
    )
    summary = (
        f"last {format_duration(window_ms)}: done {totals['done']}, retried "
        f"{totals['retried']}, failed {totals['failed']}, dead {totals['dead']}"
    )
    return Answer(data, f"{body}\n{summary}")
