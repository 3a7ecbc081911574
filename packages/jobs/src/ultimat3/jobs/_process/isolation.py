"""A job with a crash on record runs ISOLATED: nothing else in flight in its worker, until it
settles an attempt (issue 23: a poison job harms only itself).

The claim hands such a row back with ``crash_streak > 0``. A worker keeps it only when it holds
nothing else (its claim answered that row alone, with no run in flight); then it claims nothing
more until the row's run ends (``room()`` is 0). Otherwise it hands the row straight back
(``nack(outcome='release')``: uncounted, the streak kept, due at its creation time — so it is
ahead of the backlog queued since, and the lone claim finds it), stops claiming until
its runs in flight have ended, and then claims ONE row (``lone_claim``): a crashed row claimed
so runs alone, another row runs as usual. A crashed row is never held while anything else of
the worker runs, so a crash it did not cause is never charged to it as an isolated one.

A row whose isolated crashes reached ``max_crashes`` is not isolated: it is buried
``X_JOB_CRASHED`` at once, its body not run (``_run/execute.py``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ultimat3.core import log_event
from ultimat3.jobs._run.crashes import crash_exhausted, note_crash
from ultimat3.jobs.adapter import ClaimedJob

if TYPE_CHECKING:
    from ultimat3.jobs.adapter import JobDriver


class CrashIsolation:
    """One worker's isolated run, and whether it owes a lone claim."""

    __slots__ = ("_alone", "_hand_backs", "_pending")

    def __init__(self) -> None:
        self._alone: str | None = None
        self._pending = False
        self._hand_backs: set[asyncio.Task[None]] = set()

    @property
    def active(self) -> bool:
        """An isolated run is held: the worker claims nothing more until it ends."""
        return self._alone is not None

    def room(self, in_flight: int) -> int | None:
        """The worker's room while isolation rules it (``None``: they do not): 0 while an
        isolated run is held or runs in flight drain before a lone claim; 1 for the lone claim."""
        if self._alone is not None:
            return 0
        if self._pending:
            return 0 if in_flight else 1
        return None

    def admit(
        self,
        claimed: ClaimedJob,
        *,
        batch: int,
        busy: bool,
        worker_id: str,
        max_crashes: int | None,
        driver: JobDriver,
    ) -> bool:
        """Note one claimed row of a claim that answered ``batch`` rows to a worker with runs in
        flight (``busy``) or none (its crash logged and counted); answers whether the worker runs
        it. A crashed row that cannot run alone is handed back."""
        note_crash(claimed, worker_id)
        alone = not busy and batch == 1
        if alone:
            self._pending = False  # the lone claim came back: whatever it is runs now
        if claimed.crash_streak <= 0:
            return True
        if max_crashes is not None and crash_exhausted(claimed, max_crashes):
            return True  # buried at once, its body never run: nothing to isolate
        if alone and self._alone is None:
            self._alone = claimed.id
            return True
        self._pending = True
        task = asyncio.ensure_future(_hand_back(claimed, driver))
        self._hand_backs.add(task)
        task.add_done_callback(self._hand_backs.discard)
        return False

    def release(self, job_id: str) -> None:
        """A run ended. After an isolated one the worker claims one job alone again: another
        crashed row takes its turn at once, anything else ends the isolation."""
        if self._alone == job_id:
            self._alone = None
            self._pending = True


async def _hand_back(claimed: ClaimedJob, driver: JobDriver) -> None:
    error: str | None = None
    try:
        landed = await driver.nack(
            claimed.id,
            worker_id=claimed.worker_id,
            claim=claimed.claim,
            outcome="release",
            run_at_ms=claimed.created_at_ms or None,
        )
    except Exception as exc:  # its lease lapses; the next claim re-offers it
        landed = False
        error = f"{type(exc).__name__}: {exc}"
    log_event(
        "jobs.job.isolation-deferred",
        job_id=claimed.id,
        job=claimed.name,
        queue=claimed.queue,
        crash_streak=claimed.crash_streak,
        worker_id=claimed.worker_id,
        handed_back=landed,
        error=error,
        why="a job with a crash on record runs alone: this worker holds other runs, so it "
        "handed the job back and claims one job alone once they end",
    )
