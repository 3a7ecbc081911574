"""The run context ``ctx`` a body receives, its throttled ``progress`` and its ``log``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ultimat3.core import Actor, Clock, Signal, XError, log_event

if TYPE_CHECKING:
    from ultimat3.jobs.adapter import JobDriver

PROGRESS_INTERVAL_S = 1.0
"""At most one progress write a second per run; the last is always written before the settle."""


class JobLog:
    """``ctx.log``: structured events stamped with the job, its id and its attempt."""

    __slots__ = ("_fields",)

    def __init__(self, **fields: Any) -> None:
        self._fields = fields

    def debug(self, event: str, **fields: Any) -> None:
        log_event(event, level="debug", **self._fields, **fields)

    def info(self, event: str, **fields: Any) -> None:
        log_event(event, level="info", **self._fields, **fields)

    def warning(self, event: str, **fields: Any) -> None:
        log_event(event, level="warning", **self._fields, **fields)

    def error(self, event: str, **fields: Any) -> None:
        log_event(event, level="error", **self._fields, **fields)


class ProgressWriter:
    """Writes ``{done, total, note}`` on the row at most once a second, fenced on the claim."""

    __slots__ = (
        "_claim",
        "_driver",
        "_job_id",
        "_last_at",
        "_monotonic",
        "_pending",
        "_tasks",
        "_timer",
        "_worker_id",
    )

    def __init__(
        self,
        *,
        driver: JobDriver,
        job_id: str,
        worker_id: str,
        claim: str,
        monotonic: Callable[[], float],
    ) -> None:
        self._driver = driver
        self._job_id = job_id
        self._worker_id = worker_id
        self._claim = claim
        self._monotonic = monotonic
        self._last_at: float | None = None
        self._pending: dict[str, Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[bool]] = set()

    def report(self, done: int, total: int, note: str | None) -> None:
        for label, value in (("done", done), ("total", total)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise XError(
                    "X_INVARIANT",
                    f"ctx.progress: {label} {value!r} is not a whole number >= 0",
                    fix="ctx.progress(index + 1, len(rows))",
                )
        if note is not None and not isinstance(note, str):
            raise XError("X_INVARIANT", f"ctx.progress: note {note!r} is not a str")
        self._pending = {"done": done, "total": total, "note": note}
        now = self._monotonic()
        if self._last_at is None or now - self._last_at >= PROGRESS_INTERVAL_S:
            if self._timer is not None:  # written now: the throttled write is moot
                self._timer.cancel()
            self._write()
        elif self._timer is None:
            wait = PROGRESS_INTERVAL_S - (now - self._last_at)
            self._timer = asyncio.get_running_loop().call_later(wait, self._write)

    def _write(self) -> None:
        self._timer = None
        pending, self._pending = self._pending, None
        if pending is None:
            return
        self._last_at = self._monotonic()
        task = asyncio.ensure_future(self._send(pending))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, progress: Mapping[str, Any]) -> bool:
        try:
            return await self._driver.progress(
                self._job_id, worker_id=self._worker_id, claim=self._claim, progress=progress
            )
        except Exception as exc:  # progress is advisory: a failed write is not a failed run
            log_event("jobs.progress.failed", level="warning", job_id=self._job_id, error=str(exc))
            return False

    async def flush(self) -> None:
        """Write the last report now (if a throttled one waits) and wait for every write."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, None
        if self._tasks:  # earlier writes land first, so the last report is the one that stays
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._tasks, return_exceptions=True)
        if pending is not None:
            self._last_at = self._monotonic()
            await self._send(pending)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pending = None


class JobContext:
    """``ctx``: the run's signal, ids, attempt, tenant, actor, progress, clock, log and app."""

    __slots__ = (
        "_log",
        "_progress",
        "_progress_writer",
        "actor",
        "app",
        "attempt",
        "clock",
        "final_attempt",
        "job_id",
        "name",
        "run_id",
        "signal",
        "tenant_id",
    )

    def __init__(
        self,
        *,
        signal: Signal,
        job_id: str,
        run_id: str,
        name: str,
        attempt: int,
        final_attempt: bool,
        tenant_id: str | None,
        actor: Actor | None,
        clock: Clock,
        app: Any,
        log: JobLog | None = None,
        progress: ProgressWriter | None = None,
        progress_writer: Callable[[], ProgressWriter] | None = None,
    ) -> None:
        self.signal = signal
        """The run's cancellation signal: timeout, drain, lease lost, or a finished attempt."""
        self.job_id = job_id
        self.run_id = run_id
        self.name = name
        self.attempt = attempt
        """This attempt's number, 1-based; an attempt handed back uncounted (a sleep, a drain)
        is presented again under the same number."""
        self.final_attempt = final_attempt
        """True when a failure of this attempt will not be retried for want of attempts."""
        self.tenant_id = tenant_id
        self.actor = actor
        self.clock = clock
        self.app = app
        self._log = log
        self._progress = progress
        self._progress_writer = progress_writer

    @property
    def log(self) -> JobLog:
        """Structured events stamped with the job, its id and its attempt."""
        if self._log is None:
            self._log = JobLog(job=self.name, job_id=self.job_id, attempt=self.attempt)
        return self._log

    def progress(self, done: int, total: int, note: str | None = None) -> None:
        """Report progress on the row: one write a second at most, the last always written."""
        writer = self._progress
        if writer is None and self._progress_writer is not None:
            writer = self._progress = self._progress_writer()
        if writer is not None:
            writer.report(done, total, note)

    def __repr__(self) -> str:
        return f"<JobContext {self.name!r} id={self.job_id} attempt={self.attempt}>"
