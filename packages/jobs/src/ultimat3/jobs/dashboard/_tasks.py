"""Tasks: every declared or stored task with its cron, zone, paused, last fire and next fire
(the scheduler's own resolver, ``next_task_run``), and the backfill ledger. Four reads:
``now_ms``, ``task_fires``, ``paused_tasks``, the ledger."""

from __future__ import annotations

from ultimat3.core import from_epoch_ms
from ultimat3.jobs.adapter import BackfillRow

from ._context import Ctx, View, backfills_of
from ._html import Node, clip, el, table, when


async def tasks_page(ctx: Ctx) -> View:
    intro = ctx.need_intro()
    now = from_epoch_ms(await ctx.driver.now_ms())
    fires = {f.task: f for f in await intro.task_fires()}
    paused = set(await intro.paused_tasks())
    ledger = backfills_of(ctx.driver)
    backfills = [] if ledger is None else list(await ledger.list())
    declared = {t.name: t for t in ctx.tasks}
    names = sorted(set(declared) | set(fires) | paused)
    rows = []
    for name in names:
        t = declared.get(name)
        fire = fires.get(name)
        is_paused = name in paused
        rows.append(
            [
                clip(name, 48),
                t.cron if t else "-",
                t.tz if t else "-",
                el("span", "paused" if is_paused else "no", data_task_paused=name),
                when(from_epoch_ms(fire.occurrence_ms)) if fire else "-",
                when(fire.fired_at) if fire else "-",
                when(t.next_run(now)) if t else "-",
                ctx.form("resume-task", "Resume", {"task": name})
                if is_paused
                else ctx.form("pause-task", "Pause", {"task": name}),
            ]
        )
    headers = ["Task", "Cron", "Zone", "Paused", "Last fire", "Fired at", "Next fire"]
    if ctx.actions:
        headers.append("")
    body: list[Node] = [
        table(headers, rows, id="tasks")
        if rows
        else el(
            "p",
            "no tasks (jobs_dashboard(tasks=TASKS) lists the app's declarations)",
            class_="muted",
        ),
        el("h2", "Backfills"),
        _backfills(ctx, backfills),
    ]
    return View("Tasks", "/tasks", body)


def _backfills(ctx: Ctx, rows: list[BackfillRow]) -> Node:
    if not rows:
        return el("p", "no backfills recorded", class_="muted")
    return table(
        ["Backfill", "State", "Rows", "Started", "Updated", "Job", "Cursor"],
        [
            [
                clip(b.name, 40),
                b.state,
                str(b.rows),
                when(b.started_at),
                when(b.updated_at),
                el("a", b.job_id, href=ctx.url(f"/jobs/{b.job_id}")) if b.job_id else "-",
                clip(b.cursor, 40),
            ]
            for b in rows
        ],
        id="backfills",
    )
