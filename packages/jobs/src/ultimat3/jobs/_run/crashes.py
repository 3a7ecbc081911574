"""Crash accounting, the run's side: a lapse whose worker is known dead is a CRASH, not an
attempt (the driver's claim decides it and hands the row back with ``crash_streak`` and
``crashed_worker``). Here: the ``jobs.job.crashed`` log event and ``job_crashes_total`` for each
claim that follows a crash, and ``X_JOB_CRASHED`` for a job whose isolated runs crashed their
process ``max_crashes`` times (``job(max_crashes=)``, default 3)."""

from __future__ import annotations

from opentelemetry.metrics import Counter

from ultimat3.core import XError, log_event, meter
from ultimat3.jobs.adapter import ClaimedJob

_crashes_counter: Counter | None = None


def crashes_counter() -> Counter:
    global _crashes_counter
    if _crashes_counter is None:
        _crashes_counter = meter().create_counter(
            "job_crashes_total",
            description="lapses whose worker was known dead: the process died running the job",
        )
    return _crashes_counter


def isolated_crashes(claimed: ClaimedJob) -> int:
    """How many of the crashes on record happened while the job ran alone: every crash of a
    streak but its first (the first run was not isolated: anything in flight may have killed
    the process)."""
    return max(0, claimed.crash_streak - 1)


def crash_exhausted(claimed: ClaimedJob, max_crashes: int) -> bool:
    """The job's isolated runs crashed their process ``max_crashes`` times: it is dead."""
    return isolated_crashes(claimed) >= max_crashes


def note_crash(claimed: ClaimedJob, worker_id: str) -> None:
    """A claim that follows a crash: log it and count it (once, by the worker that claimed)."""
    if claimed.crashed_worker is None:
        return
    crashes_counter().add(1, {"job": claimed.name, "queue": claimed.queue})
    log_event(
        "jobs.job.crashed",
        job_id=claimed.id,
        job=claimed.name,
        queue=claimed.queue,
        attempt=claimed.attempt,
        crash_streak=claimed.crash_streak,
        isolated_crashes=isolated_crashes(claimed),
        dead_worker=claimed.crashed_worker,
        worker_id=worker_id,
        why=f"worker {claimed.crashed_worker} died holding the run (its registry row expired): "
        "a crash, not an attempt; the job now runs alone until it settles an attempt",
    )


def crashed_error(claimed: ClaimedJob, max_crashes: int) -> XError:
    """``X_JOB_CRASHED`` for ``claimed``: its process died every time it ran alone."""
    return XError(
        "X_JOB_CRASHED",
        f"job {claimed.name!r} ({claimed.id}): the worker process died while running it "
        f"{claimed.crash_streak} times in a row, {isolated_crashes(claimed)} of them with "
        f"nothing else in flight (max_crashes={max_crashes}); the last to die was worker "
        f"{claimed.crashed_worker or '(unknown)'}",
        meta={
            "job_id": claimed.id,
            "crash_streak": claimed.crash_streak,
            "isolated_crashes": isolated_crashes(claimed),
            "max_crashes": max_crashes,
            "worker_id": claimed.crashed_worker,
        },
    )
