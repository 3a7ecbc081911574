"""``run_jobs(...)``: the jobs inside an app's own process — an ASGI lifespan (FastAPI,
Starlette, any server) or any ``async with``.

It installs the driver when one is given (for the block), starts the worker (``worker=True``),
the task scheduler (``scheduler=True``: the ``Task`` values among ``jobs``) and the outbox relay
loop (``relay=True``), and on exit stops them in reverse: the worker drains — held runs hear
``X_DRAINING`` and get the drain budget (``drain_timeout_ms``) to stop, a run that stops is handed
back uncounted. It NEVER installs a signal handler: the server (uvicorn, hypercorn) owns SIGTERM
and runs the lifespan's shutdown, which is this block's exit. ``x worker`` is the one place the
library owns the process, and so its signals.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ultimat3.core import Duration, XError, swap_adapter
from ultimat3.jobs._declare.job import Job
from ultimat3.jobs._declare.task import Task
from ultimat3.jobs._process.relay_loop import RelayLoop, relay_loop
from ultimat3.jobs._process.scheduler import TaskScheduler, task_scheduler
from ultimat3.jobs._process.worker import JobWorker, job_worker
from ultimat3.jobs.adapter import JOB_DRIVER

if TYPE_CHECKING:
    from ultimat3.jobs.adapter import JobDriver

_WORKER_KNOBS: Final = frozenset(inspect.signature(job_worker).parameters) - {
    "jobs",
    "driver",
    "handle_signals",
}
_FIX = "async with run_jobs(jobs=[send_welcome], driver=driver): ..."


@dataclass(frozen=True, slots=True)
class RunningJobs:
    """What ``async with run_jobs(...) as running:`` yields: the parts it started."""

    worker: JobWorker | None
    scheduler: TaskScheduler | None
    relay: RelayLoop | None


def _refuse(message: str, fix: str = _FIX) -> XError:
    return XError("X_CONFIG_INVALID", f"run_jobs: {message}", fix=fix)


@contextlib.asynccontextmanager
async def run_jobs(
    *,
    jobs: Sequence[Job[Any, Any] | Task],
    driver: JobDriver | None = None,
    worker: bool = True,
    scheduler: bool = False,
    relay: bool = False,
    purge: bool = True,
    done_retention: Duration | None = None,
    dead_retention: Duration | None = None,
    **worker_settings: Any,
) -> AsyncIterator[RunningJobs]:
    """Run ``jobs`` for the block. ``worker_settings`` are ``job_worker``'s keywords
    (``queues=``, ``max_in_flight=``, ``settings=WorkerSettings(...)``, ...), except
    ``handle_signals`` (refused: the server owns the signals). ``purge`` /
    ``done_retention`` / ``dead_retention`` are the scheduler's (its built-in hourly
    ``x.purge``)."""
    if "handle_signals" in worker_settings:
        raise _refuse(
            "handle_signals is not an option: an app's server owns SIGTERM, and the lifespan's "
            "shutdown (this block's exit) drains the worker",
            fix="drop handle_signals=; run `x worker` for a process the library owns",
        )
    unknown = sorted(worker_settings.keys() - _WORKER_KNOBS)
    if unknown:
        raise _refuse(
            f"{', '.join(unknown)} is not a worker setting (job_worker's keywords: "
            f"{', '.join(sorted(_WORKER_KNOBS))})"
        )
    given: object = jobs
    if isinstance(given, str | bytes) or not isinstance(given, Sequence):
        raise _refuse(f"jobs {jobs!r} is not a list of jobs")
    bad = [one for one in jobs if not isinstance(one, Job | Task)]
    if bad:
        raise _refuse(f"{bad[0]!r} is neither a job nor a task")
    declared = [one for one in jobs if isinstance(one, Job)]
    tasks = [one for one in jobs if isinstance(one, Task)]
    if worker and not declared:
        raise _refuse("worker=True but jobs holds no job to run")
    if scheduler and not tasks:
        raise _refuse(
            "scheduler=True but jobs holds no task()", fix="run_jobs(jobs=[*JOBS, nightly_task])"
        )
    if not worker and worker_settings:
        raise _refuse(
            f"worker settings {sorted(worker_settings)} given with worker=False",
            fix="drop them, or worker=True",
        )
    if not (worker or scheduler or relay):
        raise _refuse("nothing to run: worker, scheduler and relay are all False")
    # build every part first, so a refused setting starts nothing
    w = (
        job_worker(jobs=declared, driver=driver, handle_signals=False, **worker_settings)
        if worker
        else None
    )
    s = (
        task_scheduler(
            tasks=tasks,
            driver=driver,
            purge=purge,
            done_retention=done_retention,
            dead_retention=dead_retention,
        )
        if scheduler
        else None
    )
    r = relay_loop(driver=driver) if relay else None
    installed = swap_adapter(JOB_DRIVER, driver) if driver is not None else None
    async with contextlib.AsyncExitStack() as stack:
        if installed is not None:
            stack.enter_context(installed)
        if w is not None:
            await w.start()
            stack.push_async_callback(w.drain, signal_name="run_jobs exit")
        if s is not None:
            await s.start()
            stack.push_async_callback(s.stop)
        if r is not None:
            await r.start()
            stack.push_async_callback(r.stop)
        yield RunningJobs(worker=w, scheduler=s, relay=r)
