"""``x jobs ...``: the operator surface over ``driver.introspect`` (``JobIntrospection``).

Every command reads or changes one thing through the driver and answers the row it touched, so
``--json`` output is what ``introspect`` returned, through ``to_json_dict``.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from typing import Any

from ultimat3.core import XError, format_duration, from_epoch_ms, parse_duration
from ultimat3.jobs.adapter import (
    ALL_STATES,
    LIVE_STATES,
    MAX_JOB_PAGE,
    BackfillRow,
    BulkCanceller,
    BulkResult,
    JobDetail,
    JobIntrospection,
    JobRow,
    check_cancellable_state,
    check_requeueable_state,
    declared_paths,
    driver_backfills,
    driver_introspect,
    job_cursor,
    show_redacted,
    to_json_dict,
)
from ultimat3.jobs.cli import _drain
from ultimat3.jobs.cli._invocation import Commands, Invocation, add_command
from ultimat3.jobs.cli._output import Answer, backfill_table, clip, error_text, table, when

DEFAULT_PAGE = 50
DEFAULT_COUNTER_WINDOW = "1h"
AMBIGUOUS_SHOWN = 10
_FULL_ID = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
_PREFIX = re.compile(r"[0-9a-f-]{1,36}")


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

    p = cmd("show", "one job's whole row with its steps (sensitive values redacted)", cmd_show)
    p.add_argument("id", help=_ID_HELP)
    p.add_argument(
        "--app",
        metavar="MODULE:ATTRIBUTE",
        help="the app's list of jobs: redact what their inputs mark x-sensitive even where no "
        "worker has declared it yet (the catalog a worker writes at start is read anyway)",
    )

    p = cmd(
        "retry",
        "requeue a finished job (or every one matching --state/--queue/--name); completed steps "
        "replay from storage",
        cmd_retry,
    )
    p.add_argument("id", nargs="?", help=_ID_HELP + "; or filter with --state and friends")
    p.add_argument("--from-step", metavar="STEP", help="run this step and every later one again")
    _bulk_filters(p, "finished", "done, failed, dead or cancelled")

    p = cmd(
        "cancel",
        "stop a live job (ready, delayed, running, suspended), or every one matching the filters",
        cmd_cancel,
    )
    p.add_argument("id", nargs="?", help=_ID_HELP + "; or filter with --queue and friends")
    p.add_argument("--reason", help="why; stored as the row's last error")
    _bulk_filters(p, "live", "ready, delayed, running or suspended")

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


_ID_HELP = "a job id, or a prefix of one that only one job has"
BULK_PREVIEW = 10
"""Rows a ``--dry-run`` lists by id."""


def _bulk_filters(p: argparse.ArgumentParser, kind: str, states: str) -> None:
    p.add_argument("--state", choices=ALL_STATES, help=f"every {kind} job in this state ({states})")
    p.add_argument("--queue", help="with --state or alone: only this queue")
    p.add_argument("--name", help="only this job name")
    p.add_argument("--tenant", help="only this tenant's jobs")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="count (and list the first few of) what would be touched; change nothing",
    )


# --- reading ---------------------------------------------------------------------------------


def attempts_text(r: JobRow) -> str:
    """``TRIES``: attempts spent of the allowed; a suspended run spent none on its wait, so it
    says it is waiting instead of reading like a run that never started."""
    spent = f"{r.attempts}/{r.max_attempts}"
    return f"{spent} waiting" if r.state == "suspended" else spent


def error_code(r: JobRow) -> str:
    """The last error's code; for an exception that is not an ``XError`` (no code), its type
    (``TypeError``); ``-`` for none."""
    error = r.last_error
    if not isinstance(error, Mapping):
        return "-"
    code = error.get("code")
    if code:
        return str(code)
    meta = error.get("meta")
    kind = meta.get("type") if isinstance(meta, Mapping) else None
    return str(kind) if kind else "-"


def _job_table(rows: list[JobRow]) -> str:
    return table(
        ("ID", "NAME", "QUEUE", "STATE", "TRIES", "RUN AT", "LAST ERROR", "KEY"),
        [
            (
                r.id,
                clip(r.name, 32),
                clip(r.queue, 20),
                r.state,
                attempts_text(r),
                when(r.run_at),
                error_code(r),
                clip(r.idempotency_key, 40),
            )
            for r in rows
        ],
    )


async def resolve_id(intro: JobIntrospection, given: str) -> str:
    """A full id as given; a prefix as the one job it starts (``X_JOB_NOT_FOUND`` for none,
    ``X_JOB_ID_AMBIGUOUS`` listing the candidates for several)."""
    if _FULL_ID.fullmatch(given):
        return given
    prefix = given.lower()
    if not _PREFIX.fullmatch(prefix):
        raise XError(
            "X_JOB_NOT_FOUND",
            f"{given!r} is neither a job id nor a prefix of one (hex digits and dashes)",
            fix="copy the id from x jobs list",
            meta={"job_id": given},
        )
    rows = await intro.list(id_prefix=prefix, limit=AMBIGUOUS_SHOWN + 1)
    if not rows:
        raise XError(
            "X_JOB_NOT_FOUND",
            f"no job id starts with {given!r}",
            fix="x jobs list --id-prefix PREFIX shows what is there",
            meta={"job_id": given},
        )
    if len(rows) > 1:
        more = " (and more)" if len(rows) > AMBIGUOUS_SHOWN else ""
        listed = ", ".join(f"{r.id} ({r.name}, {r.state})" for r in rows[:AMBIGUOUS_SHOWN])
        raise XError(
            "X_JOB_ID_AMBIGUOUS",
            f"{given!r} starts {len(rows[:AMBIGUOUS_SHOWN])}{more} job ids: {listed}",
            fix="give more of the id: enough characters that only one job has them",
            meta={"prefix": given, "candidates": [r.id for r in rows[:AMBIGUOUS_SHOWN]]},
        )
    return rows[0].id


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
        ("state", _state_text(job)),
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


def _state_text(job: JobDetail) -> str:
    """The state with what its counts mean: attempts spent (a suspension spends none) and, for a
    run with steps, how many are done."""
    text = f"{job.state}  {job.attempts} of {job.max_attempts} attempts spent"
    if job.steps:
        done = sum(1 for s in job.steps.values() if s.state == "completed")
        text += f", {done} of {len(job.steps)} recorded steps done"
    if job.state == "suspended":
        text += " (waiting: a suspension spends no attempt)"
    return text


async def cmd_show(inv: Invocation) -> Answer:
    declared = None
    if inv.args.app is not None:  # the app first: a wrong --app is refused before any dial
        from ultimat3.jobs.cli._worker import load_jobs

        declared = declared_paths(load_jobs(inv.args.app, command="x jobs show"))
    intro = await inv.introspect()  # the driver's degrade (no introspect) is refused there
    job_id = await resolve_id(intro, inv.args.id)
    job = await show_redacted(await inv.driver(), job_id, declared=declared)
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


def _filters(a: argparse.Namespace) -> dict[str, Any]:
    return {"queue": a.queue, "name": a.name, "tenant_id": a.tenant}


def _check_one_or_many(a: argparse.Namespace, command: str, example: str) -> bool:
    """True for a bulk command (no id, filters); refuses a mix, or neither."""
    filtered = a.state is not None or a.queue is not None or a.name is not None
    filtered = filtered or a.tenant is not None
    if a.id is not None and (filtered or a.dry_run):
        raise XError(
            "X_INVARIANT",
            f"x jobs {command}: give a job id OR filters (--state, --queue, --name, --tenant), "
            "not both",
            fix=f"x jobs {command} {a.id}, or x jobs {command} {example}",
        )
    if a.id is None and not filtered:
        raise XError(
            "X_INVARIANT",
            f"x jobs {command}: no job id and no filter: nothing says which jobs",
            fix=f"x jobs {command} <id>, or x jobs {command} {example} (add --dry-run to count "
            "first)",
        )
    return a.id is None


async def _preview(
    intro: JobIntrospection, a: argparse.Namespace, states: tuple[str, ...], verb: str
) -> Answer:
    """``--dry-run``: how many jobs match (paged reads, nothing changes) and the first few."""
    total = 0
    first: list[JobRow] = []
    for state in states:
        after = None
        while True:
            page = await intro.list(
                **_filters(a),
                state=state,  # type: ignore[arg-type]
                limit=MAX_JOB_PAGE,
                after=after,
            )
            total += len(page)
            first += page[: max(0, BULK_PREVIEW - len(first))]
            if len(page) < MAX_JOB_PAGE:
                break
            after = job_cursor(page[-1])
    data = {"dry_run": True, "would_touch": total, "first": to_json_dict(first)}
    lines = [f"dry run: {total} job(s) would be {verb}; nothing changed"]
    if first:
        lines.append(_job_table(first))
        if total > len(first):
            lines.append(f"... and {total - len(first)} more")
    return Answer(data, "\n".join(lines))


async def _bulk(
    run: Any, a: argparse.Namespace, states: tuple[str, ...]
) -> tuple[int, int, dict[str, Any]]:
    """Every batch of ``run(state)`` (each at most MAX_BULK_ROWS) until none remain or a batch
    moves nothing; answers (touched, left, per state)."""
    touched = left = 0
    per_state: dict[str, Any] = {}
    for state in states:
        moved = 0
        while True:
            result: BulkResult = await run(state)
            moved += result.affected
            if result.remaining == 0 or result.affected == 0:
                left += result.remaining
                break
        per_state[state] = moved
        touched += moved
    return touched, left, per_state


async def cmd_retry(inv: Invocation) -> Answer:
    a = inv.args
    intro = await inv.introspect()
    if _check_one_or_many(a, "retry", "--state dead --name send_email"):
        if a.from_step is not None:
            raise XError(
                "X_INVARIANT",
                "x jobs retry: --from-step goes with one job id, not with filters",
                fix="x jobs retry <id> --from-step STEP",
            )
        if a.state is None:
            raise XError(
                "X_INVARIANT",
                "x jobs retry: filters need --state (done, failed, dead or cancelled)",
                fix=f"x jobs retry --state dead{' --queue ' + a.queue if a.queue else ''}",
            )
        check_requeueable_state(a.state)
        if a.dry_run:
            return await _preview(intro, a, (a.state,), "requeued")
        touched, left, _ = await _bulk(
            lambda st: intro.requeue_many(state=st, **_filters(a)), a, (a.state,)
        )
        held = f"; {left} left: their key is held by a live job" if left else ""
        return Answer(
            {"requeued": touched, "left": left, "state": a.state, **_filters(a)},
            f"requeued {touched} {a.state} job(s){held}",
        )
    row = await intro.requeue(await resolve_id(intro, a.id), from_step=a.from_step)
    rerun = f", steps from {a.from_step!r} on run again" if a.from_step else ""
    return Answer(
        to_json_dict(row),
        f"job {row.id} requeued: {row.state}, due {when(row.run_at)}{rerun}; "
        f"completed steps replay from storage\nfollow it: x jobs show {row.id}",
    )


async def cmd_cancel(inv: Invocation) -> Answer:
    a = inv.args
    intro = await inv.introspect()
    if _check_one_or_many(a, "cancel", "--queue emails"):
        states = (a.state,) if a.state is not None else LIVE_STATES
        for state in states:
            check_cancellable_state(state)
        if a.dry_run:
            return await _preview(intro, a, states, "cancelled")
        if not isinstance(intro, BulkCanceller):
            driver = await inv.driver()
            raise XError(
                "X_NOT_IMPLEMENTED",
                f"the {driver.name} driver's introspection has no cancel_many: it cannot "
                "cancel by filter",
                fix="cancel one job at a time: x jobs cancel <id>",
                meta={"driver": driver.name},
            )
        bulk = intro
        touched, left, per_state = await _bulk(
            lambda st: bulk.cancel_many(state=st, reason=a.reason, **_filters(a)), a, states
        )
        return Answer(
            {"cancelled": touched, "left": left, "states": per_state, **_filters(a)},
            f"cancelled {touched} job(s) ("
            + ", ".join(f"{n} {st}" for st, n in per_state.items())
            + ")",
        )
    row = await intro.cancel(await resolve_id(intro, a.id), a.reason)
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
    intro = await inv.introspect()
    row = await intro.promote(await resolve_id(intro, inv.args.id))
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
            (
                "BUCKET",
                "SIZE",
                "JOB",
                "DONE",
                "RETRIED",
                "FAILED",
                "DEAD",
                "DONE RUN MS (SUM)",
                "DONE RUN MS (AVG)",
            ),
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
                    str(round(r.duration_ms / r.done)) if r.done else "-",
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
    if rows:
        summary += (
            "\nDONE RUN MS: the time the bucket's done runs spent in their final attempt, summed "
            "and per run (retries and dead letters add none)"
        )
    return Answer(data, f"{body}\n{summary}")
