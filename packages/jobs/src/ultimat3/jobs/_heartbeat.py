"""The lease heartbeat of one run: renew the visibility window every third of it, and say so
loudly when it is lost.

One failed renewal is ``jobs.heartbeat.failed`` (warning): the window still has room for the
next. A whole window with none landing — measured from the last renewal that landed, on the
worker's own monotonic clock, so a renewal that hangs is caught like one that raises — is
``jobs.lease.lost`` (error), one point on ``job_leases_lost_total{queue}``, and the run's signal
aborts with ``X_JOB_LEASE_LOST``. A renewal the driver REFUSES (the claim no longer holds the row:
re-claimed or cancelled) is lost at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from opentelemetry.metrics import Counter

from ultimat3.core import XError, format_duration, log_event, meter

from ._model import ClaimedJob

_lost_counter: Counter | None = None


def leases_lost_counter() -> Counter:
    global _lost_counter
    if _lost_counter is None:
        _lost_counter = meter().create_counter(
            "job_leases_lost_total",
            description="runs whose lease lapsed while their worker still ran them",
        )
    return _lost_counter


class Heartbeat:
    """Renews one claim's lease until stopped; calls ``on_lost(reason)`` once when it is lost."""

    __slots__ = (
        "_claimed",
        "_interval_s",
        "_last_landed",
        "_on_lost",
        "_renew",
        "_task",
        "_window_s",
        "lost",
    )

    def __init__(
        self,
        *,
        renew: Callable[[], Awaitable[bool]],
        claimed: ClaimedJob,
        visibility_timeout_ms: int,
        interval_ms: int | None,
        on_lost: Callable[[XError], None],
    ) -> None:
        self._renew = renew
        self._claimed = claimed
        self._window_s = visibility_timeout_ms / 1000
        self._interval_s = (interval_ms or max(1, visibility_timeout_ms // 3)) / 1000
        self._on_lost = on_lost
        self._task: asyncio.Task[None] | None = None
        self._last_landed = time.monotonic()
        self.lost = False

    def start(self) -> None:
        self._last_landed = time.monotonic()
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        claimed = self._claimed
        vt_ms = int(self._window_s * 1000)
        loop = asyncio.get_running_loop()
        while True:
            # tick on a grid every run of the process shares, so renewals coalesce into one
            # driver call; a tick never comes later than one interval after the last
            await asyncio.sleep(self._interval_s - loop.time() % self._interval_s)
            remaining = self._last_landed + self._window_s - time.monotonic()
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for drops a cancel (stop()) that
                # lands as the renewal ends, and the heartbeat would beat on, holding the run
                async with asyncio.timeout(max(remaining, 0.001)):
                    landed = await self._renew()
            except Exception as exc:  # TimeoutError included: a hanging renewal
                log_event(
                    "jobs.heartbeat.failed",
                    job_id=claimed.id,
                    job=claimed.name,
                    queue=claimed.queue,
                    worker_id=claimed.worker_id,
                    error=f"{type(exc).__name__}: {exc}",
                )
                if time.monotonic() - self._last_landed >= self._window_s:
                    self._lose(f"no renewal landed within {format_duration(vt_ms)}")
                    return
                continue
            if landed:
                self._last_landed = time.monotonic()
                continue
            self._lose("the driver refused the renewal: this claim no longer holds the run")
            return

    def _lose(self, why: str) -> None:
        claimed = self._claimed
        self.lost = True
        log_event(
            "jobs.lease.lost",
            job_id=claimed.id,
            job=claimed.name,
            queue=claimed.queue,
            worker_id=claimed.worker_id,
            why=why,
        )
        leases_lost_counter().add(1, {"queue": claimed.queue})
        self._on_lost(
            XError(
                "X_JOB_LEASE_LOST",
                f"job {claimed.name!r} ({claimed.id}) lost its lease: {why}",
                meta={"job_id": claimed.id, "queue": claimed.queue, "why": why},
            )
        )
