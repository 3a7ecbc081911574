"""``x tasks list|pause|resume``: the app's scheduled tasks, their last fire and next run.

``--app module:attribute`` names the app's list (jobs and tasks may share it; the tasks are
picked out). Without it, ``x tasks list`` still answers what the store knows: every task that
fired or is paused, without its cron. ``next_run`` is the scheduler's own resolver, read now.
"""

from __future__ import annotations

import argparse
from typing import Any

from ultimat3.core import XError, current_clock, from_epoch_ms
from ultimat3.jobs._declare.task import Task, next_task_run, tasks_of
from ultimat3.jobs.adapter import TaskFire
from ultimat3.jobs.cli._invocation import Commands, Invocation, add_command
from ultimat3.jobs.cli._output import Answer, table, when
from ultimat3.jobs.cli._worker import load_jobs


def register(root: Commands, common: argparse.ArgumentParser) -> None:
    tasks = root.add_parser("tasks", help="the app's scheduled tasks", parents=[common])
    group = tasks.add_subparsers(dest="tasks_command", metavar="<command>", required=True)
    p = add_command(
        group,
        "list",
        summary="every task: cron, zone, paused, last fire, next run",
        handler=cmd_list,
        common=common,
    )
    p.add_argument(
        "--app",
        metavar="MODULE:ATTRIBUTE",
        help="where the app's list of tasks is, e.g. myapp.jobs:TASKS (without it: only what "
        "the store knows)",
    )
    p = add_command(
        group,
        "pause",
        summary="stop a task firing, fleet-wide; on resume its catch_up decides what it missed",
        handler=cmd_pause,
        common=common,
    )
    p.add_argument("name")
    p = add_command(
        group, "resume", summary="let a paused task fire again", handler=cmd_resume, common=common
    )
    p.add_argument("name")


def app_tasks(spec: str) -> list[Task]:
    """The tasks of the list at ``module:attribute``; ``X_CONFIG_INVALID`` when it holds none."""
    found = tasks_of(load_jobs(spec))
    if not found:
        raise XError(
            "X_CONFIG_INVALID",
            f"--app {spec!r} holds no task",
            fix="put the app's task(...) declarations in that list, e.g. TASKS = [nightly_report]",
        )
    return found


async def cmd_list(inv: Invocation) -> Answer:
    intro = await inv.introspect()
    declared = app_tasks(inv.args.app) if inv.args.app else []
    fires = {f.task: f for f in await intro.task_fires()}
    paused = set(await intro.paused_tasks())
    now = current_clock().now()
    rows: list[dict[str, Any]] = []
    for t in declared:
        rows.append(
            {
                "name": t.name,
                "cron": t.cron,
                "tz": t.tz,
                "catch_up": t.catch_up,
                "paused": t.name in paused,
                "last_fire": _fire(fires.get(t.name)),
                "next_run": next_task_run(t, now).isoformat(),
            }
        )
    known = {t.name for t in declared}
    for name in sorted((set(fires) | paused) - known):  # stored, not declared in --app
        rows.append(
            {
                "name": name,
                "cron": None,
                "tz": None,
                "catch_up": None,
                "paused": name in paused,
                "last_fire": _fire(fires.get(name)),
                "next_run": None,
            }
        )
    text = (
        table(
            ["NAME", "CRON", "TZ", "PAUSED", "LAST FIRE", "NEXT RUN"],
            [
                [
                    r["name"],
                    r["cron"] or "-",
                    r["tz"] or "-",
                    "yes" if r["paused"] else "no",
                    when(from_epoch_ms(r["last_fire"]["occurrence_ms"])) if r["last_fire"] else "-",
                    r["next_run"] or "-",
                ]
                for r in rows
            ],
        )
        if rows
        else "no tasks (pass --app module:TASKS to list the app's declarations)"
    )
    return Answer({"tasks": rows}, text)


def _fire(fire: TaskFire | None) -> dict[str, Any] | None:
    if fire is None:
        return None
    return {
        "occurrence_ms": fire.occurrence_ms,
        "occurrence": from_epoch_ms(fire.occurrence_ms).isoformat(),
        "fired_at": fire.fired_at.isoformat(),
    }


async def cmd_pause(inv: Invocation) -> Answer:
    name = inv.args.name
    await (await inv.introspect()).pause_task(name)
    return Answer(
        {"task": name, "paused": True},
        f"task {name} paused: it does not fire until x tasks resume {name}",
    )


async def cmd_resume(inv: Invocation) -> Answer:
    name = inv.args.name
    await (await inv.introspect()).resume_task(name)
    return Answer(
        {"task": name, "paused": False},
        f"task {name} resumed: its catch_up decides what it missed",
    )
