"""``simulate_jobs(jobs=, workers=, invariant=, seed=)``: seeded interleavings of many workers.

Several in-process workers share ONE memory driver under a frozen clock. Every run they claim is
parked at its start and before each step function (a ``RunObserver`` gate), so nothing moves
unless a deterministic scheduler says so: each move, drawn from ``random.Random(seed)``, is one
of

- ``enqueue`` — the next input of the ``enqueue=`` plan;
- ``claim wN`` — worker N claims one due job (the run then goes as far as its start gate);
- ``advance wN <job#k>`` — one held run beats its heartbeat (the engine's own renewal of its
  row lease and its concurrency slot: a refused lease aborts it with ``X_JOB_LEASE_LOST``, a
  refused slot with ``X_JOB_SLOT_LOST``, as a late heartbeat would) and goes on to its next gate
  or its end;
- ``tick`` — with nothing else to do, the clock moves to the next due time;
- with ``faults=True``, now and then: ``crash wN`` (the worker dies: its runs stop without
  settling) and ``stall`` (the clock jumps past the visibility timeout, so every held lease and
  concurrency slot lapses while its run is parked).

``invariant(state)`` is checked after every move (``state.final`` on the last). A failing
invariant — it answers False or raises — is ``X_INVARIANT`` naming the seed, the move and the
trace; the same seed replays the same moves, so a failure reproduces from its seed alone.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from ultimat3.core import (
    AbortController,
    FrozenClock,
    XError,
    swap_adapter,
    to_epoch_ms,
    use_clock,
)
from ultimat3.jobs._declare.job import Job
from ultimat3.jobs._run.execute import execute_job
from ultimat3.jobs._run.observe import RunEvent, RunObserver
from ultimat3.jobs._run.outcome import ExecutionSettings
from ultimat3.jobs.adapter import (
    EVENT_BUS,
    JOB_DRIVER,
    LIVE_STATES,
    ClaimedJob,
    JobDetail,
    job_cursor,
)
from ultimat3.jobs.memory import MemoryJobDriver, memory_event_bus, memory_job_driver

SIM_VISIBILITY_MS: Final = 30_000
"""The leases' window on the frozen clock; time only moves by a ``tick`` or a ``stall``, and a
run's heartbeat (its row lease and its concurrency slot) is renewed by each ``advance``."""
SIM_BUSY_DELAY_MS: Final = 1_000
"""How long a run over a ``'wait'`` cap is handed back for."""
PARK_TIMEOUT_S: Final = 5.0
"""Real seconds a run gets to reach its next gate (or end) before the simulation gives up."""
DEFAULT_FAULT_RATE: Final = 0.05


@dataclass(frozen=True, slots=True)
class SimRun:
    """A run a worker holds, as the invariant sees it."""

    label: str
    """``<job name>#<n>``: the n-th row of that job, in creation order (stable across seeds)."""
    job: str
    worker: str
    attempt: int
    at: str | None
    """Where it is parked: ``'start'`` or the step it is about to call."""
    in_body: bool
    """Past its start gate (holding its concurrency slot, in its body) and not stale."""
    stale: bool
    """Its lease lapsed (a ``stall``) while it was parked: it may no longer write."""


@dataclass(frozen=True, slots=True)
class SimState:
    """What ``invariant`` is given after every move."""

    seed: int
    move: int
    trace: tuple[str, ...]
    now_ms: int
    rows: tuple[JobDetail, ...]
    """Every row, its steps included, oldest first."""
    labels: Mapping[str, str]
    """Job id -> label."""
    running: tuple[SimRun, ...]
    calls: Mapping[tuple[str, str], int]
    """``(label, step) -> returns``: how often each step function returned, per run."""
    final: bool

    def row(self, label: str) -> JobDetail:
        for r in self.rows:
            if self.labels.get(r.id) == label:
                return r
        raise KeyError(label)


@dataclass(frozen=True, slots=True)
class SimulationReport:
    seed: int
    moves: int
    trace: tuple[str, ...]
    rows: tuple[JobDetail, ...]
    labels: Mapping[str, str]
    settled: bool
    """Every row ended (no live row left) within the ``steps`` budget."""


@dataclass(slots=True)
class _Run:
    label: str
    worker: str
    claimed: ClaimedJob
    controller: AbortController
    task: asyncio.Task[Any] | None = None
    go: asyncio.Future[None] | None = None
    arrived: asyncio.Future[None] | None = None
    at: str | None = None
    in_body: bool = False
    stale: bool = False
    renew: Callable[[], Awaitable[bool]] | None = None


@dataclass(slots=True)
class _Sim(RunObserver):
    drives_heartbeat: ClassVar[bool] = True

    driver: MemoryJobDriver
    clock: FrozenClock
    jobs: dict[str, Job[Any, Any]]
    workers: list[str]
    max_in_flight: int
    seed: int
    rng: random.Random
    plan: list[tuple[Job[Any, Any], Any]]
    faults: bool
    fault_rate: float
    runs: dict[str, _Run] = field(default_factory=dict)
    """By claim token."""
    labels: dict[str, str] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    trace: list[str] = field(default_factory=list)

    # --- the gate -------------------------------------------------------------------------------

    async def observe(self, event: RunEvent) -> None:
        run = self.runs.get(event.claimed.claim)
        if run is None:
            return
        if event.kind == "return" and event.name is not None:
            self.calls[(run.label, event.name)] += 1
        if event.kind not in ("start", "call"):
            return
        if event.kind == "start":
            run.renew = event.renew
        run.at = "start" if event.kind == "start" else event.name
        run.go = asyncio.get_running_loop().create_future()
        if run.arrived is not None and not run.arrived.done():
            run.arrived.set_result(None)
        await run.go
        if event.kind == "start":
            run.in_body = True

    # --- moves ----------------------------------------------------------------------------------

    async def rows(self) -> list[JobDetail]:
        intro = self.driver.introspect
        ids = sorted(r.id for r in await _all_rows(self.driver))
        for job_id in ids:
            if job_id not in self.labels:
                name = (await intro.show(job_id)).name
                self.labels[job_id] = f"{name}#{self.counts[name]}"
                self.counts[name] += 1
        return [await intro.show(i) for i in ids]

    def held(self, worker: str) -> list[_Run]:
        return sorted((r for r in self.runs.values() if r.worker == worker), key=lambda r: r.label)

    async def moves(
        self, rows: Sequence[JobDetail]
    ) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
        now = self.clock.now_ms()
        due = any(_due(r, now) for r in rows)
        normal: list[tuple[str, ...]] = []
        if self.plan:
            normal.append(("enqueue",))
        for w in self.workers:
            held = self.held(w)
            if due and len(held) < self.max_in_flight:
                normal.append(("claim", w))
            normal.extend(("advance", w, r.claimed.claim) for r in held)
        faulty: list[tuple[str, ...]] = []
        if self.faults and self.runs:
            faulty.extend(("crash", w) for w in self.workers if self.held(w))
            faulty.append(("stall",))
        return normal, faulty

    async def apply(self, move: tuple[str, ...]) -> str:
        kind = move[0]
        if kind == "enqueue":
            job, value = self.plan.pop(0)
            result = await job.enqueue(value)
            await self.rows()
            return f"enqueue {self.labels[result.id]}"
        if kind == "claim":
            return await self._claim(move[1])
        if kind == "advance":
            return await self._advance(self.runs[move[2]])
        if kind == "crash":
            return await self._crash(move[1])
        if kind == "stall":
            self.clock.advance(SIM_VISIBILITY_MS + 1)
            for run in self.runs.values():
                run.stale = True
            return f"stall +{SIM_VISIBILITY_MS + 1}ms"
        raise AssertionError(kind)

    async def tick(self, rows: Sequence[JobDetail]) -> str | None:
        now = self.clock.now_ms()
        later = [t for r in rows if (t := _next_time(r, now)) is not None and t > now]
        if not later:
            return None
        step = min(later) - now
        self.clock.advance(step)
        return f"tick +{step}ms"

    async def _claim(self, worker: str) -> str:
        claimed = await self.driver.claim(
            queues=sorted({j.queue for j in self.jobs.values()}),
            limit=1,
            worker_id=worker,
            visibility_timeout_ms=SIM_VISIBILITY_MS,
            no_dead_letter=tuple(n for n, j in self.jobs.items() if not j.retry.dead_letter),
        )
        if not claimed:
            return f"claim {worker}: nothing"
        await self.rows()
        c = claimed[0]
        run = _Run(self.labels[c.id], worker, c, AbortController())
        self.runs[c.claim] = run
        settings = ExecutionSettings(
            visibility_timeout_ms=SIM_VISIBILITY_MS,
            observer=self,
            rng=self.rng,
            monotonic=lambda: self.clock.now_ms() / 1000,
            busy_delay_ms=SIM_BUSY_DELAY_MS,
        )
        run.arrived = asyncio.get_running_loop().create_future()
        run.task = asyncio.ensure_future(
            execute_job(
                c,
                self.jobs.get(c.name),
                driver=self.driver,
                settings=settings,
                controller=run.controller,
            )
        )
        end = await self._settle_or_park(run)
        return f"claim {worker} {run.label} (attempt {c.attempt}){end}"

    async def _advance(self, run: _Run) -> str:
        if run.renew is not None and not run.controller.signal.aborted:
            if not await run.renew():
                run.controller.abort(
                    XError("X_JOB_LEASE_LOST", f"{run.label}: another claim holds the run now")
                )
            run.stale = run.controller.signal.aborted
        was = run.at
        run.arrived = asyncio.get_running_loop().create_future()
        assert run.go is not None
        run.go.set_result(None)
        end = await self._settle_or_park(run)
        return f"advance {run.worker} {run.label} from {was}{end}"

    async def _settle_or_park(self, run: _Run) -> str:
        assert run.task is not None and run.arrived is not None
        done, _ = await asyncio.wait(
            {run.task, run.arrived}, timeout=PARK_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        if not done:
            raise XError(
                "X_INVARIANT",
                f"simulate_jobs(seed={self.seed}): run {run.label} neither reached a step nor "
                f"ended within {PARK_TIMEOUT_S}s",
                fix="a body under simulation may only wait on steps (step.run, step.sleep, "
                "step.wait_for_event), never on something outside the simulation",
            )
        if run.task.done():
            del self.runs[run.claimed.claim]
            outcome = run.task.result()
            return f" -> {outcome.outcome}" + ("" if outcome.landed else " (did not land)")
        return f" -> at {run.at}"

    async def _crash(self, worker: str) -> str:
        killed = self.held(worker)
        for run in killed:
            assert run.task is not None
            run.task.cancel()
        for run in killed:
            assert run.task is not None
            await asyncio.wait({run.task})
            del self.runs[run.claimed.claim]
        return f"crash {worker} ({', '.join(r.label for r in killed)})"

    def view(self) -> tuple[SimRun, ...]:
        return tuple(
            SimRun(
                label=r.label,
                job=r.claimed.name,
                worker=r.worker,
                attempt=r.claimed.attempt,
                at=r.at,
                in_body=r.in_body and not r.stale,
                stale=r.stale,
            )
            for r in sorted(self.runs.values(), key=lambda r: (r.worker, r.label))
        )


async def simulate_jobs(
    *,
    jobs: Sequence[Job[Any, Any]],
    inputs: Sequence[tuple[Job[Any, Any], Any]] = (),
    enqueue: Sequence[tuple[Job[Any, Any], Any]] = (),
    workers: int = 3,
    invariant: Callable[[SimState], object] | None = None,
    seed: int = 0,
    steps: int = 5_000,
    max_in_flight: int = 2,
    faults: bool = False,
    fault_rate: float = DEFAULT_FAULT_RATE,
) -> SimulationReport:
    """Run ``jobs`` on ``workers`` in-process workers, interleaved by ``random.Random(seed)``.

    ``inputs`` are enqueued before the first move; ``enqueue`` is a plan of ``(job, input)``
    enqueued one per ``enqueue`` move, in order, whenever the scheduler picks it. At most
    ``steps`` moves. ``invariant(state)`` runs after every move."""
    if workers < 1 or max_in_flight < 1 or steps < 1:
        raise XError(
            "X_INVARIANT",
            f"simulate_jobs: workers ({workers}), max_in_flight ({max_in_flight}) and steps "
            f"({steps}) must each be >= 1",
            fix="simulate_jobs(jobs=[...], workers=3, max_in_flight=2, steps=5000)",
        )
    registry = {j.name: j for j in jobs}
    clock = FrozenClock()
    driver = memory_job_driver(clock=clock)
    bus = memory_event_bus(driver)
    sim = _Sim(
        driver=driver,
        clock=clock,
        jobs=registry,
        workers=[f"w{i}" for i in range(workers)],
        max_in_flight=max_in_flight,
        seed=seed,
        rng=random.Random(seed),
        plan=list(enqueue),
        faults=faults,
        fault_rate=fault_rate,
    )
    with use_clock(clock), swap_adapter(JOB_DRIVER, driver), swap_adapter(EVENT_BUS, bus):
        for job, value in inputs:
            await job.enqueue(value)
        moves = 0
        try:
            while moves < steps:
                await bus.flush()
                rows = await sim.rows()
                normal, faulty = await sim.moves(rows)
                if faulty and (not normal or sim.rng.random() < fault_rate):
                    line = await sim.apply(sim.rng.choice(faulty))
                elif normal:
                    line = await sim.apply(sim.rng.choice(normal))
                else:
                    ticked = await sim.tick(rows)
                    if ticked is None:
                        break  # nothing held, nothing due, nothing ahead: the simulation is over
                    line = ticked
                moves += 1
                sim.trace.append(line)
                await _check(sim, invariant, moves, final=False)
            rows = await sim.rows()
            await _check(sim, invariant, moves, final=True)
        finally:
            await _stop_all(sim)
    return SimulationReport(
        seed=seed,
        moves=moves,
        trace=tuple(sim.trace),
        rows=tuple(rows),
        labels=dict(sim.labels),
        settled=not any(r.state in LIVE_STATES for r in rows),
    )


async def _check(
    sim: _Sim, invariant: Callable[[SimState], object] | None, move: int, *, final: bool
) -> None:
    if invariant is None:
        return
    state = SimState(
        seed=sim.seed,
        move=move,
        trace=tuple(sim.trace),
        now_ms=sim.clock.now_ms(),
        rows=tuple(await sim.rows()),
        labels=dict(sim.labels),
        running=sim.view(),
        calls=dict(sim.calls),
        final=final,
    )
    try:
        ok = invariant(state)
    except Exception as exc:
        raise _failed(sim, move, f"{type(exc).__name__}: {exc}") from exc
    if ok is False:
        raise _failed(sim, move, "it answered False")


def _failed(sim: _Sim, move: int, why: str) -> XError:
    last = sim.trace[-1] if sim.trace else "(before the first move)"
    tail = "\n  ".join(sim.trace[-12:])
    return XError(
        "X_INVARIANT",
        f"simulate_jobs: the invariant failed after move {move} ({last}), seed={sim.seed}: "
        f"{why}\n  last moves:\n  {tail}",
        fix=f"simulate_jobs(..., seed={sim.seed}) replays exactly these moves; "
        "meta['trace'] has all of them",
        meta={"seed": sim.seed, "move": move, "trace": list(sim.trace)},
    )


async def _stop_all(sim: _Sim) -> None:
    tasks = [r.task for r in sim.runs.values() if r.task is not None]
    for t in tasks:
        t.cancel()
    if tasks:
        await asyncio.wait(tasks)
    sim.runs.clear()


async def _all_rows(driver: MemoryJobDriver) -> list[Any]:
    out: list[Any] = []
    after: str | None = None
    while True:
        page = await driver.introspect.list(limit=200, after=after)
        out.extend(page)
        if len(page) < 200:
            return out
        after = job_cursor(page[-1])


def _due(row: JobDetail, now: int) -> bool:
    if row.state == "running":
        return row.lease_expires_at is not None and to_epoch_ms(row.lease_expires_at) <= now
    return row.state in LIVE_STATES and to_epoch_ms(row.run_at) <= now


def _next_time(row: JobDetail, now: int) -> int | None:
    if row.state == "running":
        return None if row.lease_expires_at is None else to_epoch_ms(row.lease_expires_at) + 1
    if row.state in LIVE_STATES:
        return to_epoch_ms(row.run_at)
    return None
