"""Retention: the built-in ``x.purge`` task, fired hourly by the scheduler.

Every ``task_scheduler`` (``x scheduler``, ``run_jobs(scheduler=True)``) carries it beside the
app's tasks unless ``purge=False``: one leader fleet-wide fires it at minute 0 of every hour,
its watermark moving in the fire's one operation like any task's (so a stale leader cannot purge
twice, and ``x tasks pause x.purge`` stops it). An occurrence queues no job; the leader then
runs the driver's ``purge`` in the background: ``done`` rows finished more than
``done_retention`` (14 days) ago and ``failed`` / ``dead`` / ``cancelled`` rows past
``dead_retention`` (90 days) are deleted with their steps — on Postgres one set-based
``DELETE`` per batch of 5,000 rows (memory: one pass; Redis: one script run per 1,000) — and
expired workers, lease slots and counter buckets go with them. Logged ``jobs.purge.done``
(deleted, duration_ms) or ``jobs.purge.failed`` (the next hour tries again). A driver without
``purge`` logs ``jobs.purge.unsupported`` once and keeps its rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

from ultimat3.core import Duration, XError, log_event, parse_duration
from ultimat3.jobs._declare.task import Task, task
from ultimat3.jobs.adapter import DEAD_RETENTION_MS, DONE_RETENTION_MS

PURGE_TASK: Final = "x.purge"
PURGE_CRON: Final = "0 * * * *"


@dataclass(frozen=True, slots=True)
class Retention:
    """How long finished rows are kept (milliseconds)."""

    done_ms: int = DONE_RETENTION_MS
    dead_ms: int = DEAD_RETENTION_MS


def retention(*, done: Duration | None = None, dead: Duration | None = None) -> Retention:
    """``Retention`` from durations (``'14d'``, ``timedelta(days=14)``, ms); ``X_CONFIG_INVALID``
    naming the setting for anything else."""
    try:
        done_ms = DONE_RETENTION_MS if done is None else parse_duration(done, name="done_retention")
        dead_ms = DEAD_RETENTION_MS if dead is None else parse_duration(dead, name="dead_retention")
    except XError as exc:
        raise XError(
            "X_CONFIG_INVALID",
            exc.message,
            fix="done_retention='14d', dead_retention='90d' (a whole duration > 0)",
        ) from exc
    return Retention(done_ms=done_ms, dead_ms=dead_ms)


def _no_jobs(_occurrence: object) -> list[Any]:
    return []


def purge_task() -> Task:
    """The built-in hourly ``x.purge``: an occurrence queues nothing; the scheduler purges."""
    return task(name=PURGE_TASK, cron=PURGE_CRON, enqueue=_no_jobs, catch_up="latest")


async def run_purge(driver: Any, kept: Retention, *, occurrence_ms: int) -> int | None:
    """One purge over ``driver``; answers the rows deleted (None when it failed or the driver
    has no ``purge``). Never raises: it runs in the scheduler's background."""
    purge = getattr(driver, "purge", None)
    if purge is None:
        log_event(
            "jobs.purge.unsupported",
            driver=getattr(driver, "name", type(driver).__name__),
            fix="run the scheduler on the Postgres, Redis or memory driver, or give yours "
            "purge(done_older_than_ms=, dead_older_than_ms=)",
        )
        return None
    started = time.monotonic()
    try:
        deleted = int(await purge(done_older_than_ms=kept.done_ms, dead_older_than_ms=kept.dead_ms))
    except Exception as exc:
        log_event(
            "jobs.purge.failed",
            occurrence_ms=occurrence_ms,
            code=getattr(exc, "code", None),
            error=f"{type(exc).__name__}: {exc}"[:300],
        )
        return None
    log_event(
        "jobs.purge.done",
        occurrence_ms=occurrence_ms,
        deleted=deleted,
        done_retention_ms=kept.done_ms,
        dead_retention_ms=kept.dead_ms,
        duration_ms=round((time.monotonic() - started) * 1000),
    )
    return deleted
