"""``task_scheduler()``: fire the app's tasks, one leader fleet-wide.

- **One leader**: the lease slot ``x:scheduler`` of the driver's ``LeaseStore``, renewed every
  ``renew_ms`` (10 s) with a ``lease_ms`` (30 s) ttl. A standby reads the holder's expiry and tries
  again when it lapses, so a dead leader is replaced within one lease.
- **Idle costs nothing**: the scheduler ticks every second, and with nothing due reads no store.
  Each task's watermark (its last fire) is held in memory while it leads, loaded once when it
  takes the lead; an idle minute is the lease's 6 renewals, for any number of tasks.
- **One operation per fire**: an occurrence's jobs are built by the facade's own path
  (``Task.requests``) and queued by the driver's ``fire_task`` together with the watermark, only
  if the occurrence is later than the recorded one. A crash between "queued" and "recorded"
  cannot happen, so neither can a second fire of one occurrence — not even by a stale leader.
- **Paused tasks** (``introspect.pause_task``) are read only when one of them is due, and while
  one is known paused, at each lease renewal: a resumed task catches up within ``renew_ms``.
- **Missed occurrences**: one more than ``LATE_MS`` (60 s) late, or due while the task was paused,
  was missed; the task's ``catch_up`` decides (``'latest'``, ``'all'`` bounded by
  ``MAX_CATCH_UP``, ``'none'``). A later one fires on time. A task that never fired starts from
  ``LATE_MS`` before the scheduler took the lead.

- **Retention**: the built-in ``x.purge`` (``_process/purge.py``) rides along unless
  ``purge=False``: hourly, the leader deletes finished rows past ``done_retention`` (14 d) /
  ``dead_retention`` (90 d) in the background.

Log events: ``jobs.scheduler.lead``, ``jobs.scheduler.lost``, ``jobs.scheduler.standby``,
``jobs.task.fired``, ``jobs.task.skipped``, ``jobs.task.fire-failed``; a span
``x.task.fire`` per fire.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from ultimat3.core import (
    Clock,
    Duration,
    SystemClock,
    XError,
    adapter,
    log_event,
    new_id,
    tracer,
)
from ultimat3.jobs._declare.cron import latest_between, next_after
from ultimat3.jobs._declare.task import MAX_CATCH_UP, Task
from ultimat3.jobs._process.purge import PURGE_TASK, Retention, purge_task, retention, run_purge
from ultimat3.jobs.adapter import JobDriver, JobIntrospection, LeaseStore, TaskFirer, driver_leases

LEASE_KEY: Final = "x:scheduler"
LEASE_MS: Final = 30_000
RENEW_MS: Final = 10_000
TICK_MS: Final = 1_000
LATE_MS: Final = 60_000
"""An occurrence at most this late fires on time, whatever the task's ``catch_up``: a failover
(at most one lease) never costs a fire."""
RETRY_MS: Final = 5_000
"""A fire the driver could not take is tried again this much later."""


FireOutcome = Literal["fired", "done", "paused", "retry"]


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    leading: bool
    fired: int
    skipped: int
    failed: int
    leads: int


class TaskScheduler:
    """Fires ``tasks``; never built directly — use ``task_scheduler()``."""

    def __init__(
        self,
        *,
        tasks: Sequence[Task],
        driver: JobDriver | None,
        clock: Clock | None,
        lease_ms: int,
        renew_ms: int,
        tick_ms: int,
        keep: Retention | None = None,
    ) -> None:
        self.id: Final = f"scheduler-{new_id()}"
        self.tasks: Final = tuple(tasks) + ((purge_task(),) if keep is not None else ())
        self.retention: Final = keep
        """How long finished rows are kept; None when ``purge=False``."""
        self._purging: asyncio.Task[int | None] | None = None
        self._driver = driver
        self._clock = clock if clock is not None else SystemClock()
        self._lease_ms = lease_ms
        self._renew_ms = renew_ms
        self._tick_ms = tick_ms
        self._slot: int | None = None
        self._renew_at = 0
        self._expires_at = 0
        self._attempt_at = 0
        self._watermark: dict[str, int] = {}
        self._look_at: dict[str, int] = {}
        self._paused_through: dict[str, int] = {}
        self._paused: set[str] = set()
        self._loop: asyncio.Task[None] | None = None
        self._standby_logged = False
        self._fired = self._skipped = self._failed = self._leads = 0

    def __repr__(self) -> str:
        return f"<TaskScheduler {self.id} tasks={len(self.tasks)} leading={self.leading}>"

    @property
    def leading(self) -> bool:
        return self._slot is not None

    def stats(self) -> SchedulerStats:
        return SchedulerStats(self.leading, self._fired, self._skipped, self._failed, self._leads)

    # --- lifecycle --------------------------------------------------------------------------

    def _parts(self) -> tuple[JobDriver, LeaseStore, TaskFirer, JobIntrospection]:
        from ultimat3.jobs.adapter import JOB_DRIVER

        driver = self._driver if self._driver is not None else adapter(JOB_DRIVER)
        self._driver = driver
        leases = driver_leases(driver)
        intro = getattr(driver, "introspect", None)
        missing = [
            what
            for what, ok in (
                ("a lease store (driver.leases)", leases is not None),
                ("fire_task", isinstance(driver, TaskFirer)),
                ("introspection (driver.introspect)", intro is not None),
            )
            if not ok
        ]
        if missing:
            raise XError(
                "X_CONFIG_INVALID",
                f"the scheduler cannot run on the {driver.name!r} driver: it lacks "
                + ", ".join(missing),
                fix="run the scheduler on the Postgres, Redis or memory driver, or implement "
                "TaskFirer.fire_task and LeaseStore on yours",
                meta={"driver": driver.name, "missing": missing},
            )
        assert leases is not None and intro is not None and isinstance(driver, TaskFirer)
        return driver, leases, driver, intro

    async def start(self) -> None:
        """Check the driver, then tick every ``tick_ms`` in the background until ``stop()``."""
        if self._loop is not None:
            return
        self._parts()
        self._loop = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop ticking and hand the lead back (a standby takes it at its next try); a purge in
        progress is cancelled (its batch rolls back; the next leader's hour purges)."""
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop
        purging, self._purging = self._purging, None
        if purging is not None:
            purging.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await purging
        if self._slot is not None:
            slot, self._slot = self._slot, None
            _, leases, _, _ = self._parts()
            with contextlib.suppress(Exception):  # the lease lapses on its own anyway
                await leases.release(LEASE_KEY, slot, holder=self.id)
            log_event("jobs.scheduler.stepped-down", scheduler=self.id)

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a store hiccup: the next tick tries again
                log_event(
                    "jobs.scheduler.tick-failed",
                    level="warning",
                    scheduler=self.id,
                    error=repr(exc),
                    code=getattr(exc, "code", None),
                )
            now = self._clock.now_ms()
            await asyncio.sleep((self._tick_ms - now % self._tick_ms) / 1000)

    # --- one tick -----------------------------------------------------------------------------

    async def tick(self) -> None:
        """One pass: keep (or try for) the lead; while leading, fire every task that is due.
        With nothing due and no lease work, it touches no store."""
        now = self._clock.now_ms()
        if self._slot is None:
            if now < self._attempt_at or not await self._take_lead(now):
                return
        elif now >= self._renew_at and not await self._renew(now):
            return
        due = [t for t in self.tasks if self._look_at[t.name] <= now]
        if not due:
            return
        _, _, _, intro = self._parts()
        paused = set(await intro.paused_tasks())
        for t in due:
            await self._process(t, now, paused)

    async def _take_lead(self, now: int) -> bool:
        _, leases, _, intro = self._parts()
        grant = await leases.acquire(LEASE_KEY, limit=1, holder=self.id, ttl_ms=self._lease_ms)
        if grant is None:
            driver, _, _, _ = self._parts()
            held = await leases.holders(LEASE_KEY)
            store_now = await driver.now_ms()  # the lease's clock, not ours
            left = max((g.expires_at_ms for g in held), default=store_now) - store_now
            # try again when the holder's lease lapses (a dead leader: within one lease)
            self._attempt_at = now + min(self._lease_ms, max(self._tick_ms, left + 1))
            if not self._standby_logged:
                self._standby_logged = True
                log_event(
                    "jobs.scheduler.standby",
                    scheduler=self.id,
                    leader=held[0].holder if held else None,
                )
            return False
        # the watermarks first: a read that fails leaves this scheduler a standby (the next
        # tick asks again, and a holder asking again gets its own slot back)
        fires = {f.task: f.occurrence_ms for f in await intro.task_fires()}
        self._paused = set(await intro.paused_tasks()) & {t.name for t in self.tasks}
        self._paused_through.clear()
        self._slot = grant.slot
        self._standby_logged = False
        self._renew_at = now + self._renew_ms
        self._expires_at = now + self._lease_ms
        self._leads += 1
        armed_from = now - LATE_MS - 1  # an occurrence LATE_MS late still fires on time
        for t in self.tasks:
            self._watermark[t.name] = fires.get(t.name, armed_from)
            self._look_at[t.name] = next_after(t.cron, t.zone, self._watermark[t.name])
        log_event(
            "jobs.scheduler.lead",
            scheduler=self.id,
            token=grant.token,
            tasks=len(self.tasks),
            paused=sorted(self._paused),
        )
        return True

    async def _renew(self, now: int) -> bool:
        _, leases, _, intro = self._parts()
        assert self._slot is not None
        try:
            kept = await leases.renew(LEASE_KEY, self._slot, holder=self.id, ttl_ms=self._lease_ms)
        except Exception as exc:
            if now < self._expires_at:
                self._renew_at = now + self._tick_ms  # try again next tick, still the leader
                log_event(
                    "jobs.scheduler.renew-failed",
                    level="warning",
                    scheduler=self.id,
                    error=repr(exc),
                )
                return True
            kept = False
        if not kept:
            self._slot = None
            self._attempt_at = now + self._tick_ms
            log_event("jobs.scheduler.lost", level="warning", scheduler=self.id)
            return False
        self._renew_at = now + self._renew_ms
        self._expires_at = now + self._lease_ms
        if self._paused:  # a resumed task catches up within one renewal
            still = set(await intro.paused_tasks())
            for name in self._paused - still:
                self._look_at[name] = now
            self._paused &= still
        return True

    async def _process(self, t: Task, now: int, paused: set[str]) -> None:
        name = t.name
        base = self._watermark[name]
        due = latest_between(t.cron, t.zone, base, now, keep=MAX_CATCH_UP)
        if name in paused:
            self._paused.add(name)
            if due:
                self._paused_through[name] = due[-1]
                self._skipped += 1
                log_event(
                    "jobs.task.skipped",
                    task=name,
                    reason="paused",
                    occurrence_ms=due[-1],
                )
            self._look_at[name] = next_after(t.cron, t.zone, now)
            return
        self._paused.discard(name)
        through = self._paused_through.get(name, base)
        on_time = [o for o in due if o >= now - LATE_MS and o > through]
        if t.catch_up == "all":
            fire = due
        elif t.catch_up == "latest":
            fire = due[-1:]
        else:
            fire = on_time
        missed = len(due) - len(fire)
        if missed:
            self._skipped += missed
            log_event(
                "jobs.task.skipped",
                task=name,
                reason="missed",
                catch_up=t.catch_up,
                count=missed,
                occurrence_ms=max(o for o in due if o not in fire),
            )
        for occurrence in fire:
            outcome = await self._fire(t, occurrence, late=occurrence not in on_time)
            if outcome == "retry":
                self._look_at[name] = now + RETRY_MS
                return
            if outcome == "paused":  # paused since the read above: the driver refused it
                self._paused.add(name)
                self._paused_through[name] = due[-1]
                self._look_at[name] = next_after(t.cron, t.zone, now)
                return
        if due:
            self._watermark[name] = max(self._watermark[name], due[-1])
        self._look_at[name] = next_after(t.cron, t.zone, max(now, self._watermark[name]))

    async def _fire(self, t: Task, occurrence: int, *, late: bool) -> FireOutcome:
        """One occurrence, one driver operation: ``'fired'``; ``'done'`` (fired before, or its
        jobs refused: logged, the occurrence skipped); ``'paused'``; ``'retry'`` (the driver
        could not take it: tried again later)."""
        _, _, firer, intro = self._parts()
        attributes: dict[str, str | int | bool] = {
            "x.task": t.name,
            "x.task.occurrence_ms": occurrence,
            "x.task.catch_up": late,
        }
        with tracer().start_as_current_span("x.task.fire", attributes=attributes) as span:
            try:
                requests = t.requests(occurrence)
            except XError as exc:
                self._failed += 1
                span.set_attribute("x.task.outcome", "refused")
                log_event(
                    "jobs.task.fire-failed",
                    level="error",
                    task=t.name,
                    occurrence_ms=occurrence,
                    code=exc.code,
                    error=exc.message,
                )
                return "done"
            try:
                fired = await firer.fire_task(t.name, occurrence, requests)
            except Exception as exc:
                self._failed += 1
                span.set_attribute("x.task.outcome", "failed")
                log_event(
                    "jobs.task.fire-failed",
                    level="warning",
                    task=t.name,
                    occurrence_ms=occurrence,
                    code=getattr(exc, "code", None),
                    error=repr(exc),
                    retry_in_ms=RETRY_MS,
                )
                return "retry"
            # a refusal is a fire already made, or a pause that landed since the read: ask which
            paused = not fired and t.name in await intro.paused_tasks()
            outcome = "fired" if fired else "paused" if paused else "already-fired"
            span.set_attribute("x.task.outcome", outcome)
            span.set_attribute("x.task.jobs", len(requests) if fired else 0)
        if paused:
            self._skipped += 1
            log_event("jobs.task.skipped", task=t.name, reason="paused", occurrence_ms=occurrence)
            return "paused"
        self._watermark[t.name] = max(self._watermark[t.name], occurrence)
        if fired:
            self._fired += 1
            log_event(
                "jobs.task.fired",
                task=t.name,
                occurrence_ms=occurrence,
                jobs=len(requests),
                late=late,
            )
            if t.name == PURGE_TASK and self.retention is not None:
                self._start_purge(occurrence)
        else:
            self._skipped += 1
            log_event(
                "jobs.task.skipped", task=t.name, reason="already-fired", occurrence_ms=occurrence
            )
        return "fired" if fired else "done"

    def _start_purge(self, occurrence: int) -> None:
        if self._purging is not None and not self._purging.done():
            return  # the last hour's purge is still going: it covers this one
        assert self.retention is not None
        driver, _, _, _ = self._parts()
        self._purging = asyncio.ensure_future(
            run_purge(driver, self.retention, occurrence_ms=occurrence)
        )

    async def purge_done(self) -> int | None:
        """Wait for the purge in progress, if any (tests, a graceful stop); answers its
        count."""
        purging = self._purging
        return None if purging is None else await purging


def task_scheduler(
    *,
    tasks: Sequence[Task],
    driver: JobDriver | None = None,
    clock: Clock | None = None,
    lease_ms: int = LEASE_MS,
    renew_ms: int = RENEW_MS,
    tick_ms: int = TICK_MS,
    purge: bool = True,
    done_retention: Duration | None = None,
    dead_retention: Duration | None = None,
) -> TaskScheduler:
    """The scheduler of ``tasks`` over ``driver`` (default: the installed ``JOB_DRIVER``).
    ``await s.start()`` ticks in the background; ``await s.stop()`` hands the lead back.
    Run one per process that should be able to lead; only one leads at a time. The built-in
    hourly ``x.purge`` rides along (``purge=False`` drops it): finished rows are kept for
    ``done_retention`` (``'14d'``) / ``dead_retention`` (``'90d'``), then deleted."""
    if not isinstance(purge, bool):
        raise XError(
            "X_CONFIG_INVALID",
            f"task_scheduler: purge {purge!r} is not a bool",
            fix="purge=True (the default: the hourly x.purge) or purge=False",
        )
    if not purge and (done_retention is not None or dead_retention is not None):
        raise XError(
            "X_CONFIG_INVALID",
            "task_scheduler: done_retention / dead_retention given with purge=False: nothing "
            "would apply them",
            fix="drop purge=False, or the retention settings",
        )
    keep = retention(done=done_retention, dead=dead_retention) if purge else None
    names = [getattr(t, "name", None) for t in tasks]
    if purge and PURGE_TASK in names:
        raise XError(
            "X_CONFIG_INVALID",
            f"task_scheduler(tasks=...) declares {PURGE_TASK!r}, the built-in retention task's "
            "name",
            fix="rename the task, or pass purge=False to run your own",
        )
    bad = [t for t in tasks if not isinstance(t, Task)]
    dupes = sorted({n for n in names if names.count(n) > 1 and n is not None})
    if bad or dupes:
        raise XError(
            "X_CONFIG_INVALID",
            "task_scheduler(tasks=...) "
            + (f"holds {bad[0]!r}, not a task" if bad else f"names task {dupes[0]!r} twice"),
            fix="pass the Task objects task(...) answered, each name once",
        )
    for what, value in (("lease_ms", lease_ms), ("renew_ms", renew_ms), ("tick_ms", tick_ms)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise XError(
                "X_CONFIG_INVALID",
                f"task_scheduler: {what} {value!r} is not a positive whole number of ms",
                fix=f"leave {what} at its default",
            )
    if renew_ms >= lease_ms:
        raise XError(
            "X_CONFIG_INVALID",
            f"task_scheduler: renew_ms {renew_ms} is not shorter than lease_ms {lease_ms}",
            fix="renew well inside the lease: renew_ms=10_000 with lease_ms=30_000",
        )
    return TaskScheduler(
        tasks=tasks,
        driver=driver,
        clock=clock,
        lease_ms=lease_ms,
        renew_ms=renew_ms,
        tick_ms=tick_ms,
        keep=keep,
    )
