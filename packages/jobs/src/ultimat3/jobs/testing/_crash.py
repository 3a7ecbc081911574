"""``crash_proof(job, input)``: what a crash at every step boundary does to a job.

It runs ONE job to its end, killing the run right after each step record lands — the worker
dies as a real one would: nothing settles, the heartbeat stops, the concurrency slot is kept —
then lets the lease lapse and claims the run again, until it ends. Every boundary is killed at
once (``<step>:<state>``: ``charge:completed``, ``sleep:1:completed``, ``unwinding:completed``,
``compensate:charge:completed``, a wait's ``started`` marker; never a once-step's ``started``
marker, where stopping for an operator IS the guarantee).

Each step function (and compensator) is counted as the run calls it. A completed step whose
function returned more than once is a double effect; a step a crashed attempt completed that the
final attempt never asked for is a name that is not stable across replays. Either is
``X_JOB_CRASH_DIVERGED`` naming the step; otherwise the answer is a ``CrashReport``.

On its own memory driver (the default) it moves a frozen clock through lapses, backoffs, sleeps
and event polls. Given ``driver=`` (a fresh one: it claims from ``job.queue``), pass the
``clock`` that drives it, or it waits for real (keep ``visibility_timeout_ms`` short then).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from ultimat3.core import FrozenClock, XError, new_id, swap_adapter, to_epoch_ms, use_clock
from ultimat3.jobs._declare.job import Job
from ultimat3.jobs._declare.policy import attempts_for
from ultimat3.jobs._run.execute import execute_job
from ultimat3.jobs._run.observe import RunEvent, RunObserver
from ultimat3.jobs._run.outcome import ExecutionSettings
from ultimat3.jobs._run.steps import COMPENSATE_PREFIX, RESERVED_STEP
from ultimat3.jobs.adapter import (
    EVENT_BUS,
    JOB_DRIVER,
    LIVE_STATES,
    EnqueueRequest,
    EventBus,
    JobDetail,
    JobDriver,
    JobState,
    StepRecord,
    driver_introspect,
)
from ultimat3.jobs.memory import memory_event_bus, memory_job_driver

MAX_CLAIMS: Final = 10_000
"""Claims one ``crash_proof`` makes at most before it calls the run stuck."""


@dataclass(frozen=True, slots=True)
class CrashReport:
    """How the crashed run ended."""

    job_id: str
    state: JobState
    attempts: int
    """Claims the row took, the crashed ones included."""
    crashes: tuple[str, ...]
    """Every boundary the run was killed at, in order (``<step>:<state>``)."""
    calls: Mapping[str, int]
    """Step functions (and ``compensate:<name>`` compensators) called, by step."""
    result: Any
    last_error: Mapping[str, Any] | None
    steps: Mapping[str, StepRecord]


class _Crasher(RunObserver):
    def __init__(self, max_crashes: int) -> None:
        self.max_crashes = max_crashes
        self.task: asyncio.Task[Any] | None = None
        self.crashes: list[str] = []
        self.crashed_now = False
        self.calls: Counter[str] = Counter()
        self.returns: Counter[str] = Counter()
        self.seen: set[str] = set()
        """The step names the current attempt asked for."""
        self.completed: set[str] = set()
        """The steps whose completed record landed, in any attempt."""
        self.before: set[str] = set()
        """``completed`` as the current attempt started."""
        self.unstable: str | None = None
        """A step an earlier attempt completed that this one went past without asking for."""
        self.diverged: tuple[str, str | None] | None = None

    async def observe(self, event: RunEvent) -> None:
        name = event.name or ""
        if event.kind == "start":
            self.seen = set()
            self.before = set(self.completed)
        elif event.kind == "step":
            self.seen.add(name)
        elif event.kind == "call":
            self.calls[name] += 1
        elif event.kind == "return":
            self.returns[name] += 1
            if self.returns[name] == 2 and self.diverged is None:
                self.diverged = (name, self.crashes[-1] if self.crashes else None)
        elif event.kind == "record" and not (event.once and event.state == "started"):
            if event.state == "completed":
                self.completed.add(name)
            boundary = f"{name}:{event.state}"
            if boundary in self.crashes or len(self.crashes) >= self.max_crashes:
                return
            if self.unstable is None and not _framework(name):
                # a replay asks again for every step it passes: one it went past unasked is a
                # name that changed (crashing on would mint a new one every time)
                missing = sorted(n for n in self.before - self.seen if not _framework(n))
                self.unstable = missing[0] if missing else None
            if self.unstable is not None:
                return
            self.crashes.append(boundary)
            self.crashed_now = True
            assert self.task is not None
            self.task.cancel()  # the worker dies here: nothing after this line runs
            await asyncio.get_running_loop().create_future()


async def crash_proof(
    job: Job[Any, Any],
    input: Any,
    *,
    driver: JobDriver | None = None,
    clock: FrozenClock | None = None,
    event_bus: EventBus | None = None,
    visibility_timeout_ms: int = 30_000,
    max_crashes: int = 100,
    seed: int = 0,
) -> CrashReport:
    """Run ``job(input)`` to its end, killed after every step record lands; raises
    ``X_JOB_CRASH_DIVERGED`` naming the step on a double effect, answers a ``CrashReport``."""
    own = driver is None
    if own and clock is None:
        clock = FrozenClock()
    the_driver = driver if driver is not None else memory_job_driver()
    bus = event_bus if event_bus is not None else memory_event_bus(the_driver) if own else None
    with _bound(the_driver, clock, bus):
        return await _crash_proof(
            job, input, the_driver, clock, bus, visibility_timeout_ms, max_crashes, seed
        )


@contextlib.contextmanager
def _bound(driver: JobDriver, clock: FrozenClock | None, bus: EventBus | None) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        if clock is not None:
            stack.enter_context(use_clock(clock))
        stack.enter_context(swap_adapter(JOB_DRIVER, driver))
        if bus is not None:
            stack.enter_context(swap_adapter(EVENT_BUS, bus))
        yield


async def _crash_proof(
    job: Job[Any, Any],
    input: Any,
    driver: JobDriver,
    clock: FrozenClock | None,
    bus: EventBus | None,
    vt: int,
    max_crashes: int,
    seed: int,
) -> CrashReport:
    intro = driver_introspect(driver)
    if intro is None:
        raise XError(
            "X_NOT_IMPLEMENTED",
            f"crash_proof: the driver {driver.name!r} has no introspect to read the run back",
            fix="leave driver= unset (the memory driver), or pass one with introspect",
        )
    parsed = job.parse(input)
    # headroom for the crashes, which the run itself never sees (its attempts are presented
    # as if no crash had spent one)
    request = EnqueueRequest(
        id=new_id(),
        run_id=new_id(),
        name=job.name,
        queue=job.queue,
        payload=job.payload_of(parsed),
        idempotency_key=job.idempotency_key_for(parsed),
        max_attempts=attempts_for(job) + max_crashes,
        tenant_id=job.tenant_of(parsed),
        concurrency_key=job.concurrency_key_for(parsed),
    )
    job_id = (await driver.enqueue(request)).id
    observer = _Crasher(max_crashes)
    settings = ExecutionSettings(
        visibility_timeout_ms=vt,
        observer=observer,
        rng=random.Random(seed),
        event_bus=bus,
        monotonic=(lambda: clock.now_ms() / 1000) if clock is not None else None,
    )
    for n in range(MAX_CLAIMS):
        row = await intro.show(job_id)
        if row.state not in LIVE_STATES:
            break
        claimed = await driver.claim(
            queues=[job.queue], limit=1, worker_id=f"crash-proof:{n}", visibility_timeout_ms=vt
        )
        mine = [c for c in claimed if c.id == job_id]
        if not mine:
            await _wait_for(row, driver, clock)
            continue
        spent = len(observer.crashes)
        run = replace(
            mine[0],
            attempt=mine[0].attempt - spent,
            max_attempts=mine[0].max_attempts - max_crashes,
        )
        observer.crashed_now = False
        task = asyncio.ensure_future(execute_job(run, job, driver=driver, settings=settings))
        observer.task = task
        await asyncio.wait({task})
        if task.cancelled():
            if not observer.crashed_now:
                raise asyncio.CancelledError
            await _elapse(vt + 1, clock)  # the dead worker's lease lapses
            continue
        task.result()
    else:
        raise XError(
            "X_INVARIANT",
            f"crash_proof: job {job.name!r} ({job_id}) did not end within {MAX_CLAIMS} claims",
            fix="a run that waits forever (an event nobody publishes, no timeout)? give the wait "
            "a timeout",
            meta={"job_id": job_id},
        )
    final = await intro.show(job_id)
    _check(job, final, observer)
    return CrashReport(
        job_id=job_id,
        state=final.state,
        attempts=final.attempts,
        crashes=tuple(observer.crashes),
        calls=dict(observer.calls),
        result=final.result,
        last_error=final.last_error,
        steps=dict(final.steps),
    )


def _check(job: Job[Any, Any], final: JobDetail, observer: _Crasher) -> None:
    twice = sorted(
        name
        for name, n in observer.returns.items()
        if n > 1 and (rec := final.steps.get(name)) is not None and rec.state == "completed"
    )
    if twice:
        name = twice[0]
        boundary = observer.diverged[1] if observer.diverged else None
        after = f" after the crash at {boundary}" if boundary else ""
        raise XError(
            "X_JOB_CRASH_DIVERGED",
            f"crash_proof({job.name!r}): step {name!r} completed, yet its function returned "
            f"{observer.returns[name]} times{after}: a crash made it run again (a double effect)",
            fix=f"make step {name!r} land its record once its function returned (a driver whose "
            "step store drops a write?), or make the function idempotent (an upsert, a dedupe key "
            "sent to the provider)",
            meta=_meta(final, observer, name, boundary),
        )
    orphans = sorted(
        name
        for name, rec in final.steps.items()
        if rec.state == "completed" and name not in observer.seen and not _framework(name)
    )
    if observer.unstable is not None or (final.state == "done" and orphans):
        name = observer.unstable or orphans[0]
        raise XError(
            "X_JOB_CRASH_DIVERGED",
            f"crash_proof({job.name!r}): step {name!r} completed before a crash, but the replay "
            "that finished the run never asked for it: the step's name is not stable, so its "
            "work ran again under another name",
            fix="name steps from the input or from stored step outputs only — never the time, a "
            "random value or anything read outside a step",
            meta=_meta(final, observer, name, None),
        )


def _meta(final: JobDetail, observer: _Crasher, step: str, boundary: str | None) -> dict[str, Any]:
    return {
        "job_id": final.id,
        "step": step,
        "boundary": boundary,
        "crashes": list(observer.crashes),
        "calls": dict(observer.calls),
    }


def _framework(name: str) -> bool:
    return name == RESERVED_STEP or name.startswith(COMPENSATE_PREFIX)


async def _wait_for(row: JobDetail, driver: JobDriver, clock: FrozenClock | None) -> None:
    """Move time to the row's next moment: its run time, or its lease's lapse."""
    now = await driver.now_ms()
    if row.state == "running" and row.lease_expires_at is not None:
        at = to_epoch_ms(row.lease_expires_at) + 1
    else:
        at = to_epoch_ms(row.run_at)
    await _elapse(max(1, at - now), clock)


async def _elapse(ms: int, clock: FrozenClock | None) -> None:
    if clock is not None:
        clock.advance(ms)
    else:
        await asyncio.sleep(ms / 1000)
