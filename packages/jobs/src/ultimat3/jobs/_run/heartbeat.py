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
from ultimat3.jobs.adapter import ClaimedJob

_lost_counter: Counter | None = None


def leases_lost_counter() -> Counter:
    global _lost_counter
    if _lost_counter is None:
        _lost_counter = meter().create_counter(
            "job_leases_lost_total",
            description="runs whose lease lapsed while their worker still ran them",
        )
    return _lost_counter


class _Grid:
    """One timer per event loop and interval: every heartbeat of the process with that interval
    ticks on it (so renewals coalesce into one driver call), and a run costs no task of its own
    until a tick finds it."""

    __slots__ = ("interval_s", "loop", "members", "timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, interval_s: float) -> None:
        self.loop = loop
        self.interval_s = interval_s
        self.members: dict[Heartbeat, None] = {}
        self.timer: asyncio.TimerHandle | None = None

    def add(self, beat: Heartbeat) -> None:
        self.members[beat] = None
        if self.timer is None:
            self._schedule()

    def discard(self, beat: Heartbeat) -> None:
        self.members.pop(beat, None)
        if not self.members:
            if self.timer is not None:
                self.timer.cancel()
                self.timer = None
            key = (id(self.loop), self.interval_s)
            if _GRIDS.get(key) is self:
                del _GRIDS[key]

    def _schedule(self) -> None:
        # the next grid point: a tick never comes later than one interval after the last
        loop = self.loop
        interval = self.interval_s
        self.timer = loop.call_at(loop.time() + interval - loop.time() % interval, self._tick)

    def _tick(self) -> None:
        self.timer = None
        for beat in list(self.members):
            beat._tick()
        if self.members:
            self._schedule()


_GRIDS: dict[tuple[int, float], _Grid] = {}
"""The grids by event loop and interval; one is dropped as its last member leaves (a grid left
behind by a loop that is gone is replaced)."""


def _grid(interval_s: float) -> _Grid:
    loop = asyncio.get_running_loop()
    key = (id(loop), interval_s)
    grid = _GRIDS.get(key)
    if grid is None or grid.loop is not loop:
        grid = _GRIDS[key] = _Grid(loop, interval_s)
    return grid


class Heartbeat:
    """Renews one claim's lease until stopped; calls ``on_lost(reason)`` once when it is lost.

    It ticks on the process-wide grid of its interval (``_Grid``): a tick starts one renewal
    unless the last one is still out (a hanging renewal is cut at the window's end)."""

    __slots__ = (
        "_beat",
        "_claimed",
        "_grid",
        "_interval_s",
        "_last_landed",
        "_on_lost",
        "_renew",
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
        self._grid: _Grid | None = None
        self._beat: asyncio.Task[None] | None = None
        self._last_landed = time.monotonic()
        self.lost = False

    def start(self) -> None:
        self._last_landed = time.monotonic()
        self._grid = _grid(self._interval_s)
        self._grid.add(self)

    def halt(self) -> asyncio.Task[None] | None:
        """Stop ticking; answers the renewal still out, if one is (``stop`` cancels it)."""
        grid, self._grid = self._grid, None
        if grid is not None:
            grid.discard(self)
        beat, self._beat = self._beat, None
        return beat if beat is not None and not beat.done() else None

    async def stop(self, beat: asyncio.Task[None] | None = None) -> None:
        """Stop ticking and cancel the renewal still out, waiting for it to stop."""
        beat = beat or self.halt()
        if beat is not None and not beat.done():
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat

    def _tick(self) -> None:
        if self._beat is None or self._beat.done():
            self._beat = asyncio.ensure_future(self._renew_once())

    async def _renew_once(self) -> None:
        claimed = self._claimed
        remaining = self._last_landed + self._window_s - time.monotonic()
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for drops a cancel (stop()) that lands
            # as the renewal ends
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
                self._lose(
                    f"no renewal landed within {format_duration(int(self._window_s * 1000))}"
                )
            return
        if landed:
            self._last_landed = time.monotonic()
            return
        self._lose("the driver refused the renewal: this claim no longer holds the run")

    def _lose(self, why: str) -> None:
        claimed = self._claimed
        self.lost = True
        grid, self._grid = self._grid, None
        if grid is not None:
            grid.discard(self)  # no tick after a loss
        log_event(
            "jobs.lease.lost",
            job_id=claimed.id,
            job=claimed.name,
            attempt=claimed.attempt,
            queue=claimed.queue,
            worker_id=claimed.worker_id,
            code="X_JOB_LEASE_LOST",
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
