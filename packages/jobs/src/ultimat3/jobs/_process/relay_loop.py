"""``relay_loop(...)``: the outbox relay as a running loop (``x relay``, ``x worker --relay``,
``run_jobs(relay=True)``).

A pass is ``outbox_relay`` (one batch). While passes find rows the loop passes again after
``interval_ms`` (200 ms); while they do not, the pause doubles up to ``idle_poll_max_ms`` (2 s;
5 s while the store's wake is proven). A store offering ``start_wake(on_wake)`` (the Postgres
outbox: a LISTEN on the stage's commit notification) wakes an idle loop at once. A pass that
raises is logged ``jobs.outbox.relay-failed`` and the loop backs off as if idle.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ultimat3.core import XError, adapter, log_event
from ultimat3.jobs._process.relay import DEFAULT_RELAY_BATCH, DEFAULT_RELAY_LEASE_MS, outbox_relay

if TYPE_CHECKING:
    from ultimat3.jobs.adapter import JobDriver, OutboxStore

DEFAULT_RELAY_INTERVAL_MS: Final = 200
DEFAULT_RELAY_IDLE_MAX_MS: Final = 2000
RELAY_WAKE_PROVEN_IDLE_MS: Final = 5000


@dataclass(frozen=True, slots=True)
class RelayStats:
    """``loop.stats()``: passes made, rows published, passes that raised, wakes heard."""

    running: bool
    passes: int
    published: int
    failures: int
    wakes: int
    wake_proven: bool


class RelayLoop:
    """Made by ``relay_loop(...)``: ``await start()``, ``await stop()``, ``wake()``, ``stats()``."""

    def __init__(
        self,
        *,
        store: OutboxStore | None,
        driver: JobDriver | None,
        interval_ms: int,
        idle_poll_max_ms: int,
        batch_size: int,
        lease_ms: int,
    ) -> None:
        self._store = store
        self._driver = driver
        self._interval_s = interval_ms / 1000
        self._idle_max_s = idle_poll_max_ms / 1000
        self._batch_size = batch_size
        self._lease_ms = lease_ms
        self._task: asyncio.Task[None] | None = None
        self._woken = asyncio.Event()
        self._stopping = False
        self._wake_handle: Any = None
        self._passes = self._published = self._failures = self._wakes = 0

    @property
    def store(self) -> OutboxStore:
        if self._store is None:
            from ultimat3.jobs.adapter import OUTBOX_STORE

            self._store = adapter(OUTBOX_STORE)
        return self._store

    @property
    def driver(self) -> JobDriver:
        if self._driver is None:
            from ultimat3.jobs.adapter import JOB_DRIVER

            self._driver = adapter(JOB_DRIVER)
        return self._driver

    @property
    def wake_proven(self) -> bool:
        return getattr(self._wake_handle, "proven", False) is True

    def stats(self) -> RelayStats:
        return RelayStats(
            running=self._task is not None and not self._task.done(),
            passes=self._passes,
            published=self._published,
            failures=self._failures,
            wakes=self._wakes,
            wake_proven=self.wake_proven,
        )

    def wake(self, _note: object = None) -> None:
        """Pass at once (the store's commit notification calls it)."""
        self._wakes += 1
        self._woken.set()

    async def start(self) -> None:
        """Resolve the store and driver, start the store's wake when it has one, and loop in the
        background until ``stop()``."""
        if self._task is not None:
            return
        store, _ = self.store, self.driver
        self._stopping = False
        start_wake = getattr(store, "start_wake", None)
        if start_wake is not None:
            try:
                self._wake_handle = await start_wake(self.wake)
            except Exception as exc:  # the poll is the guarantee
                log_event("jobs.wake.lost", level="warning", error=f"{type(exc).__name__}: {exc}")
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        """Stop after the pass in progress (a pass is never cut in half)."""
        self._stopping = True
        self._woken.set()
        task, self._task = self._task, None
        if task is not None:
            await task
        handle, self._wake_handle = self._wake_handle, None
        if handle is not None:
            with contextlib.suppress(Exception):
                await handle.stop()

    async def run_pass(self) -> int:
        self._passes += 1
        published = await outbox_relay(
            self.store, self.driver, batch_size=self._batch_size, lease_ms=self._lease_ms
        )
        self._published += published
        return published

    async def _loop(self) -> None:
        idle = self._interval_s
        while not self._stopping:
            self._woken.clear()
            try:
                found = await self.run_pass()
            except Exception as exc:
                self._failures += 1
                log_event(
                    "jobs.outbox.relay-failed",
                    level="warning",
                    error=f"{type(exc).__name__}: {exc}"[:300],
                )
                found = 0
            ceiling = (
                max(self._idle_max_s, RELAY_WAKE_PROVEN_IDLE_MS / 1000)
                if self.wake_proven
                else self._idle_max_s
            )
            wait, idle = relay_pause(
                found=found, idle_s=idle, interval_s=self._interval_s, ceiling_s=ceiling
            )
            with contextlib.suppress(asyncio.TimeoutError):  # stop() sets it too
                await asyncio.wait_for(self._woken.wait(), timeout=wait)
            if self._woken.is_set():
                idle = self._interval_s


def relay_pause(
    *, found: int, idle_s: float, interval_s: float, ceiling_s: float
) -> tuple[float, float]:
    """After a pass: ``(wait, next idle)``. A pass that found rows waits ``interval_s`` and
    resets the idle pause; an empty one waits the idle pause, which doubles up to
    ``ceiling_s`` (200 ms, 400, 800, 1.6 s, 2 s, 2 s, ...)."""
    if found:
        return interval_s, interval_s
    wait = min(idle_s, ceiling_s)
    return wait, min(wait * 2, ceiling_s)


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise XError(
            "X_CONFIG_INVALID",
            f"relay_loop: {name} {value!r} is not a whole number > 0",
            fix=f"relay_loop({name}=...)",
        )
    return value


def relay_loop(
    *,
    store: OutboxStore | None = None,
    driver: JobDriver | None = None,
    interval_ms: int = DEFAULT_RELAY_INTERVAL_MS,
    idle_poll_max_ms: int = DEFAULT_RELAY_IDLE_MAX_MS,
    batch_size: int = DEFAULT_RELAY_BATCH,
    lease_ms: int = DEFAULT_RELAY_LEASE_MS,
) -> RelayLoop:
    """The relay loop over ``store`` (default: the installed ``OUTBOX_STORE``) onto ``driver``
    (default: the installed ``JOB_DRIVER``), both resolved at ``start()``."""
    for name, value in (
        ("interval_ms", interval_ms),
        ("idle_poll_max_ms", idle_poll_max_ms),
        ("batch_size", batch_size),
        ("lease_ms", lease_ms),
    ):
        _positive(name, value)
    if idle_poll_max_ms < interval_ms:
        raise XError(
            "X_CONFIG_INVALID",
            f"relay_loop: idle_poll_max_ms {idle_poll_max_ms} is below interval_ms {interval_ms}",
            fix="idle_poll_max_ms >= interval_ms",
        )
    return RelayLoop(
        store=store,
        driver=driver,
        interval_ms=interval_ms,
        idle_poll_max_ms=idle_poll_max_ms,
        batch_size=batch_size,
        lease_ms=lease_ms,
    )
