"""``x scheduler --app module:attribute``: fire the app's tasks until SIGTERM or SIGINT.

Run one in every process that may lead (a deploy's pods, say): one leads fleet-wide, the others
stand by and take over within one lease of the leader's death. On a signal it stops ticking and
hands the lead back, so a standby takes it at its next try.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from ultimat3.core import format_duration, swap_adapter
from ultimat3.jobs.adapter import JOB_DRIVER, to_json_dict
from ultimat3.jobs.cli._invocation import Commands, Invocation
from ultimat3.jobs.cli._output import Answer
from ultimat3.jobs.cli._signals import stop_signals
from ultimat3.jobs.cli._tasks import app_tasks

WATCH_S = 0.25
"""How often the command looks at the scheduler to report a change of lead."""


def register(root: Commands, common: argparse.ArgumentParser) -> None:
    summary = "fire the app's tasks (one leader fleet-wide) until SIGTERM or SIGINT"
    p = root.add_parser("scheduler", help=summary, description=summary, parents=[common])
    p.set_defaults(handler=cmd_scheduler)
    p.add_argument(
        "--app",
        required=True,
        metavar="MODULE:ATTRIBUTE",
        help="where the app's list of tasks is, e.g. myapp.jobs:TASKS",
    )
    p.add_argument(
        "--done-retention",
        metavar="DURATION",
        help="keep done rows this long, then the hourly x.purge deletes them (default 14d)",
    )
    p.add_argument(
        "--dead-retention",
        metavar="DURATION",
        help="keep dead, failed and cancelled rows this long (default 90d)",
    )
    p.add_argument(
        "--no-purge",
        action="store_true",
        help="do not run the built-in hourly x.purge (retention) in this scheduler",
    )


async def cmd_scheduler(inv: Invocation) -> Answer:
    from ultimat3.jobs._process.scheduler import task_scheduler

    tasks = app_tasks(inv.args.app)
    driver = await inv.driver()
    with swap_adapter(JOB_DRIVER, driver), stop_signals() as (stop, received):
        scheduler = task_scheduler(
            tasks=tasks,
            driver=driver,
            purge=not inv.args.no_purge,
            done_retention=inv.args.done_retention,
            dead_retention=inv.args.dead_retention,
        )
        try:
            await scheduler.start()
            kept = scheduler.retention
            purging = (
                "no x.purge"
                if kept is None
                else f"x.purge hourly (done kept {format_duration(kept.done_ms)}, dead "
                f"{format_duration(kept.dead_ms)})"
            )
            inv.progress(
                f"x scheduler: {scheduler.id}, {len(tasks)} task(s) from {inv.args.app} on the "
                f"{driver.name} driver, {purging}; SIGTERM or Ctrl-C stops it"
            )
            leading = None
            while not stop.is_set():
                if scheduler.leading != leading:
                    leading = scheduler.leading
                    inv.progress("x scheduler: leading" if leading else "x scheduler: standing by")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), WATCH_S)
            inv.progress(f"x scheduler: {received[0]} received: stopping")
        finally:
            await scheduler.stop()
    stats = scheduler.stats()
    data = {"app": inv.args.app, "signal": received[0], "stats": to_json_dict(stats)}
    return Answer(
        data,
        f"x scheduler: stopped after {received[0]}: {stats.fired} fired, {stats.skipped} "
        f"skipped, {stats.failed} failed",
    )
