"""One job: its fields, input (redacted), the step timeline, the last error, and the actions
its state allows. Two reads: ``show`` and the backfill ledger."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ultimat3.jobs.adapter import (
    LIVE_STATES,
    PROMOTABLE_STATES,
    TERMINAL_STATES,
    BackfillRow,
    JobDetail,
    StepRecord,
    show_redacted,
)

from ._context import Ctx, View, backfills_of, state_badge
from ._html import Node, as_json, clip, el, table, when

COMPENSATE = "compensate:"
"""The step name a compensator runs under: ``compensate:<the step it undoes>``."""


def timeline(job: JobDetail) -> list[StepRecord]:
    """The steps in the order they were last written (unwritten times last)."""
    indexed = list(enumerate(job.steps.values()))

    def key(item: tuple[int, StepRecord]) -> tuple[int, datetime | int, int]:
        index, step = item
        at = step.updated_at
        return (0, at, index) if at is not None else (1, 0, index)

    return [step for _, step in sorted(indexed, key=key)]


def replayed(steps: list[StepRecord]) -> set[str]:
    """Completed steps a later attempt read back from storage: one that completed before a
    step that ran more than once (the body reaches its steps in order, so every rerun of the
    later step went through the earlier one's stored output)."""
    out: set[str] = set()
    rerun_after = False
    for step in reversed(steps):
        if step.state == "completed" and rerun_after:
            out.add(step.name)
        if step.executions > 1:
            rerun_after = True
    return out


def _ms(delta_s: float) -> str:
    ms = int(delta_s * 1000)
    return f"{ms} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"


def error_block(error: Mapping[str, Any] | None) -> Node:
    if not error:
        return el("p", "none", class_="muted")
    meta = error.get("meta") or {}
    trace = error.get("traceback") or error.get("stack")
    if trace is None and isinstance(meta, Mapping):
        trace = meta.get("traceback") or meta.get("stack")
    return el(
        "div",
        el(
            "p",
            el("code", error.get("code") or "unclassified"),
            ": ",
            el("span", str(error.get("message") or ""), class_="error-message"),
        ),
        el("p", "fix: ", str(error["fix"]), class_="muted") if error.get("fix") else None,
        el("pre", as_json(meta), class_="error-meta") if meta else None,
        el("pre", trace if isinstance(trace, str) else as_json(trace), class_="traceback")
        if trace
        else None,
        class_="error",
    )


def _steps(job: JobDetail) -> Node:
    steps = timeline(job)
    if not steps:
        return el("p", "no steps recorded", class_="muted")
    again = replayed(steps)
    rows = []
    previous: datetime | None = job.created_at
    for s in steps:
        notes: list[Node] = []
        if s.name in again:
            notes.append(el("span", "replayed from storage", class_="muted"))
        if s.name.startswith(COMPENSATE):
            notes.append(el("span", f"undoes {s.name[len(COMPENSATE) :]}", class_="muted"))
        gap = (
            _ms((s.updated_at - previous).total_seconds())
            if s.updated_at is not None and previous is not None
            else "-"
        )
        previous = s.updated_at or previous
        outcome = error_block(s.error) if s.error else el("pre", as_json(s.output))
        rows.append(
            [
                el("span", s.name, class_="step-name"),
                state_badge(s.state, step=True),
                str(s.executions),
                when(s.updated_at),
                gap,
                notes,
                outcome,
            ]
        )
    return table(
        ["Step", "State", "Runs", "At", "Since previous", "", "Output / error"],
        rows,
        id="timeline",
    )


def _actions(ctx: Ctx, job: JobDetail) -> Node:
    if not ctx.actions:
        return None
    forms: list[Node] = []
    if job.state in TERMINAL_STATES:
        forms.append(ctx.form("retry", "Retry", {"id": job.id}))
        if job.steps:
            options = [el("option", name, value=name) for name in (s.name for s in timeline(job))]
            forms.append(
                ctx.form(
                    "retry",
                    "Retry from step",
                    {"id": job.id},
                    el("select", options, name="from_step", aria_label="from step"),
                    " ",
                )
            )
    if job.state in PROMOTABLE_STATES:
        forms.append(ctx.form("promote", "Run now", {"id": job.id}))
    if job.state in LIVE_STATES:
        forms.append(
            ctx.form(
                "cancel",
                "Cancel",
                {"id": job.id},
                el("input", type="text", name="reason", placeholder="reason", aria_label="reason"),
                " ",
            )
        )
    if not forms:
        return None
    return [el("h2", "Actions"), el("div", forms, id="actions")]


def _fields(job: JobDetail, backfill: BackfillRow | None) -> Node:
    pairs: list[tuple[str, Node]] = [
        ("Id", el("code", job.id)),
        ("Name", job.name),
        ("Queue", job.queue),
        ("State", state_badge(job.state)),
        ("Attempts", f"{job.attempts} of {job.max_attempts}"),
        ("Run at", when(job.run_at)),
        ("Created", when(job.created_at)),
        ("Updated", when(job.updated_at)),
        ("Finished", when(job.finished_at)),
        ("Run id", job.run_id),
        ("Idempotency key", job.idempotency_key),
        ("Tenant", job.tenant_id or "-"),
        ("Concurrency key", job.concurrency_key or "-"),
        ("Worker", job.worker_id or "-"),
        ("Lease until", when(job.lease_expires_at)),
        ("Progress", clip(job.progress, 80)),
    ]
    if backfill is not None:
        pairs.append(
            (
                "Backfill",
                f"{backfill.name} {backfill.state}, {backfill.rows} rows, "
                f"cursor {clip(backfill.cursor, 40)}",
            )
        )
    return el("dl", [[el("dt", k), el("dd", v)] for k, v in pairs], class_="fields", id="fields")


async def job_page(ctx: Ctx, job_id: str) -> View:
    ctx.need_intro()
    job = await show_redacted(ctx.driver, job_id)  # the catalog's x-sensitive paths, key names
    ledger = backfills_of(ctx.driver)
    backfill = None
    if ledger is not None:
        backfill = next((b for b in await ledger.list() if b.job_id == job.id), None)
    body: list[Node] = [
        _fields(job, backfill),
        _actions(ctx, job),
        el("h2", "Step timeline"),
        _steps(job),
        el("h2", "Last error"),
        el("div", error_block(job.last_error), id="last-error"),
        el("h2", "Input"),
        el("pre", as_json(job.payload), id="payload"),
    ]
    if job.result is not None:
        body += [el("h2", "Result"), el("pre", as_json(job.result), id="result")]
    return View(f"Job {job.name}", "/jobs", body)
