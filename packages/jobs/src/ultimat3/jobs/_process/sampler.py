"""The worker's queue sample behind ``queue_depth{queue}`` and ``queue_demand{queue}``.

OpenTelemetry calls an observable gauge's callback synchronously (on the SDK's collection thread),
so the gauges cannot ask the store: they read the last sample a worker took. Each worker whose
driver is a ``QueueSampler`` samples every queue it serves with ONE ``sample_queues`` statement
(set-based, read-only, index-only counts capped at ``DEPTH_SAMPLE_CAP``) per interval — 15 s by
default (``job_worker(depth_sample_interval_ms=...)``), the HPA's own sync period — and only
while the gauges are being read: no SDK, no exporter, no scrape, no statement. The first read
wakes the sampler at once; it keeps sampling while reads keep coming within ``READ_WINDOW_S``,
then sleeps until the next read. A gauge reports no sample older than ``STALE_INTERVALS``
intervals, so a sampler that stopped (or a store that fails) leaves a gap, never a frozen value.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Final

from ultimat3.core import log_event
from ultimat3.jobs.adapter import JobDriver, QueueSample, QueueSampler

DEFAULT_DEPTH_SAMPLE_INTERVAL_MS: Final = 15_000
READ_WINDOW_S: Final = 300.0
"""The sampler keeps sampling while the gauges were read within this long."""
STALE_INTERVALS: Final = 3
"""A sample older than this many intervals is not reported."""

_last_read = 0.0
_read_lock = threading.Lock()


def mark_read() -> None:
    """The depth gauges were just read (called from the collecting thread)."""
    global _last_read
    with _read_lock:
        _last_read = time.monotonic()


def read_within(seconds: float) -> bool:
    with _read_lock:
        return _last_read > 0 and time.monotonic() - _last_read <= seconds


class DepthSampler:
    """One worker's sampler: ``start`` it with the driver and the queues, ``stop`` it with the
    worker; ``fresh()`` is what the gauges report."""

    __slots__ = ("_loop", "_task", "_wanted", "failing", "interval_s", "sampled_at", "samples")

    def __init__(self, interval_ms: int) -> None:
        self.interval_s = interval_ms / 1000
        self.samples: tuple[QueueSample, ...] = ()
        self.sampled_at: float | None = None
        """``time.monotonic()`` when ``samples`` were taken."""
        self.failing = False
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wanted: asyncio.Event | None = None

    def start(self, driver: JobDriver, queues: Sequence[str]) -> None:
        """Start sampling ``queues`` when the gauges ask (a driver with no ``sample_queues``
        reports no depth)."""
        if self._task is not None or not isinstance(driver, QueueSampler):
            return
        self._loop = asyncio.get_running_loop()
        self._wanted = asyncio.Event()
        self._task = asyncio.ensure_future(self._run(driver, list(queues)))

    async def stop(self) -> None:
        task, self._task = self._task, None
        self._loop = None
        self.samples, self.sampled_at = (), None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def want(self) -> None:
        """Wake the sampler (thread-safe: the gauges call it from the collecting thread)."""
        loop, wanted = self._loop, self._wanted
        if loop is None or wanted is None or wanted.is_set() or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(wanted.set)

    def fresh(self) -> tuple[QueueSample, ...]:
        """The last sample, unless it is older than ``STALE_INTERVALS`` intervals."""
        at = self.sampled_at
        if at is None or time.monotonic() - at > STALE_INTERVALS * self.interval_s:
            return ()
        return self.samples

    async def sample(self, driver: QueueSampler, queues: Sequence[str]) -> None:
        """Take one sample now (one ``sample_queues`` statement)."""
        try:
            samples = await driver.sample_queues(queues)
        except Exception as exc:
            if not self.failing:  # once per failing streak: the gauges show the gap
                log_event("jobs.sample.failed", error=f"{type(exc).__name__}: {exc}"[:300])
            self.failing = True
            return
        self.failing = False
        self.samples, self.sampled_at = tuple(samples), time.monotonic()

    async def _run(self, driver: QueueSampler, queues: list[str]) -> None:
        wanted = self._wanted
        assert wanted is not None
        while True:
            if not read_within(READ_WINDOW_S):
                wanted.clear()
                await wanted.wait()
            await self.sample(driver, queues)
            await asyncio.sleep(self.interval_s)
