"""A job with a crash on record runs ISOLATED: nothing else in flight in its worker, until it
settles an attempt (issue 23: a poison job harms only itself).

The claim hands such a row back with ``crash_streak > 0``. The worker keeps claiming nothing
while one is held (``active``); the isolated run waits — its lease renewed every third of the
window — until every other run of the worker has ended, then runs alone. Two isolated rows take
turns, oldest claim first. A run whose isolated crashes reached ``max_crashes`` skips the wait
(it is buried ``X_JOB_CRASHED`` without running its body, ``_run/execute.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ultimat3.core import log_event
from ultimat3.jobs._run.crashes import crash_exhausted, note_crash
from ultimat3.jobs.adapter import ClaimedJob

if TYPE_CHECKING:
    from ultimat3.core import Signal
    from ultimat3.jobs._run.outcome import ExecutionSettings
    from ultimat3.jobs.adapter import JobDriver


class CrashIsolation:
    """One worker's isolated runs, in claim order."""

    __slots__ = ("_order",)

    def __init__(self) -> None:
        self._order: list[str] = []

    @property
    def active(self) -> bool:
        """An isolated run is held: the worker claims nothing more until it ends."""
        return bool(self._order)

    def claimed(self, claimed: ClaimedJob, worker_id: str, max_crashes: int | None) -> bool:
        """Note a claimed row (its crash logged and counted); answers whether it must run alone."""
        note_crash(claimed, worker_id)
        if claimed.crash_streak <= 0:
            return False
        if max_crashes is not None and crash_exhausted(claimed, max_crashes):
            return False  # buried at once, never run: nothing to isolate
        self._order.append(claimed.id)
        return True

    async def wait_alone(
        self,
        claimed: ClaimedJob,
        *,
        runs: Mapping[str, tuple[asyncio.Task[None], Any]],
        driver: JobDriver,
        settings: ExecutionSettings,
        signal: Signal,
    ) -> bool:
        """Wait until ``claimed`` is the oldest isolated run and no other run is in flight,
        renewing its lease every third of the window meanwhile. ``False``: a renewal was refused
        (the claim is gone). An aborted ``signal`` (a drain) ends the wait at once."""
        vt = settings.visibility_timeout_ms
        interval_s = (settings.heartbeat_interval_ms or max(1, vt // 3)) / 1000

        async def renew() -> bool:
            return await driver.heartbeat(
                claimed.id,
                worker_id=claimed.worker_id,
                claim=claimed.claim,
                visibility_timeout_ms=vt,
            )

        me = claimed.id
        loop = asyncio.get_running_loop()
        renewed = loop.time()
        while not signal.aborted:
            order = self._order
            busy = [
                task
                for job_id, (task, _) in runs.items()
                if job_id != me and (job_id not in order or order[0] == job_id)
            ]
            if not busy and order and order[0] == me:
                return True
            left = max(0.0, renewed + interval_s - loop.time())
            if busy:
                await asyncio.wait(busy, timeout=left)
            else:
                await asyncio.sleep(min(left, 0.05))
            if loop.time() - renewed < interval_s:
                continue
            renewed = loop.time()
            try:
                landed = await renew()
            except Exception as exc:  # the window still has room; the next renewal decides
                log_event(
                    "jobs.heartbeat.failed",
                    job_id=me,
                    job=claimed.name,
                    worker_id=claimed.worker_id,
                    error=f"{type(exc).__name__}: {exc}",
                )
                continue
            if not landed:
                log_event(
                    "jobs.settle.unowned",
                    job_id=me,
                    job=claimed.name,
                    worker_id=claimed.worker_id,
                    settle="isolated wait (lease renewal)",
                )
                return False
        return True  # draining: the run hands the attempt back at once

    def holds(self, job_id: str) -> bool:
        """``job_id`` is an isolated run of this worker (waiting or running)."""
        return job_id in self._order

    def release(self, job_id: str) -> None:
        """The isolated run ended (settled, lost or abandoned): the next may go."""
        if job_id in self._order:
            self._order.remove(job_id)
