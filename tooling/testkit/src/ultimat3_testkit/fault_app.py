"""The jobs of the fault tests, and a worker process that runs them.

``python -m ultimat3_testkit.fault_app --dsn ... --schema ...`` runs
``job_worker`` over :data:`JOBS` on a Postgres driver, optionally with its LISTEN wake, and writes
every log event of the ``ultimat3`` logger as one JSON line to ``--events`` (``t`` is the real
wall time, ``pid`` the process). SIGTERM (or SIGINT) drains the worker, logs ``faults.stopped``
with its stats and exits 0; a refusal at start logs ``faults.refused`` and exits 2.

Every step function records its executions in ``fault_effects`` (in the driver's schema), each
write in a transaction of its own on a connection of its own, so a test can count what a body did
whatever became of the run. ``FAULTS_CLOCK_OFFSET_S`` moves this process's wall clock
(``time.time``, ``time.time_ns`` and ultimat3's installed clock) that many seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import psycopg
from psycopg import sql
from pydantic import BaseModel

from ultimat3.core import Signal, XError, current_clock, install_clock, log_event
from ultimat3.jobs import Concurrency, Job, JobContext, Retry, Step, job, job_worker
from ultimat3.jobs.adapter import install_job_driver
from ultimat3.jobs.postgres import PostgresJobDriver, QueueWake, start_queue_wake

QUEUE: Final = "faults"
STEPS: Final = ("a", "b", "c")
REAL_TIME: Final = time.time

# --- where the step functions write -----------------------------------------------------------

_target: dict[str, str] = {}
_background: set[asyncio.Task[None]] = set()


def configure(dsn: str, schema: str) -> None:
    """Where ``fault_effects`` and ``fault_gates`` live (the driver's database and schema)."""
    _target["dsn"] = dsn
    _target["schema"] = schema


async def effect(job_id: str, step: str, attempt: int, note: str) -> None:
    """One row in ``fault_effects``, committed before this returns (``at`` is the database's
    clock_timestamp())."""
    query = sql.SQL(
        "INSERT INTO {} (job_id, step, attempt, pid, note) VALUES (%s, %s, %s, %s, %s)"
    ).format(sql.Identifier(_target["schema"], "fault_effects"))
    async with await psycopg.AsyncConnection.connect(
        _target["dsn"], autocommit=True, connect_timeout=5
    ) as conn:
        await conn.execute(query, (job_id, step, attempt, os.getpid(), note))


async def _first_start(job_id: str, step: str) -> bool:
    """This is the step's first run (one ``start`` recorded): a crash re-runs it under the
    same attempt number (a crash is not an attempt), so the attempt cannot tell."""
    query = sql.SQL(
        "SELECT count(*) FROM {} WHERE job_id = %s AND step = %s AND note = 'start'"
    ).format(sql.Identifier(_target["schema"], "fault_effects"))
    async with await psycopg.AsyncConnection.connect(
        _target["dsn"], autocommit=True, connect_timeout=5
    ) as conn:
        cur = await conn.execute(query, (job_id, step))
        row = await cur.fetchone()
        return bool(row and row[0] == 1)


async def gate_open(job_id: str) -> bool:
    query = sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE job_id = %s)").format(
        sql.Identifier(_target["schema"], "fault_gates")
    )
    async with await psycopg.AsyncConnection.connect(
        _target["dsn"], autocommit=True, connect_timeout=5
    ) as conn:
        cur = await conn.execute(query, (job_id,))
        row = await cur.fetchone()
        return bool(row and row[0])


def _record_abort(signal: Signal, job_id: str, step: str, attempt: int) -> None:
    """When the run's signal aborts, write ``aborted:<code>`` — from a task of its own, so the
    cancellation of the body that follows the abort cannot stop the write."""
    loop = asyncio.get_running_loop()

    def spawn(reason: XError) -> None:
        task = loop.create_task(effect(job_id, step, attempt, f"aborted:{reason.code}"))
        _background.add(task)
        task.add_done_callback(_background.discard)

    def on_abort(reason: XError) -> None:
        loop.call_soon_threadsafe(spawn, reason)

    signal.add_listener(on_abort)


# --- the jobs -----------------------------------------------------------------------------------


class Work(BaseModel):
    key: str
    hang: str | None = None
    """The step whose FIRST run never returns: it holds the run until the run is aborted
    (``aborted:<code>`` is recorded) or the process dies."""
    gate: str | None = None
    """The step whose first attempt returns only once ``fault_gates`` holds the job's id."""
    pause_ms: int = 0
    """How long each step function sleeps before it returns."""


def _step_fn(name: str, work: Work, ctx: JobContext) -> Callable[[Signal], Awaitable[Any]]:
    async def fn(signal: Signal) -> dict[str, Any]:
        await effect(ctx.job_id, name, ctx.attempt, "start")
        if work.hang == name and await _first_start(ctx.job_id, name):
            _record_abort(signal, ctx.job_id, name, ctx.attempt)
            await asyncio.sleep(120)  # until the run is cancelled or the process killed
        if work.gate == name and ctx.attempt == 1:
            for _ in range(3000):  # a minute at most
                if await gate_open(ctx.job_id):
                    break
                await asyncio.sleep(0.02)
        if work.pause_ms:
            await asyncio.sleep(work.pause_ms / 1000)
        return {"step": name, "attempt": ctx.attempt, "pid": os.getpid()}

    return fn


async def steps_body(work: Work, step: Step, ctx: JobContext) -> list[Any]:
    return [await step.run(name, _step_fn(name, work, ctx)) for name in STEPS]


STEPS_JOB: Final[Job[Work, list[Any]]] = job(
    input=Work,
    idempotency_key=lambda w: w.key,
    name="faults.steps",
    queue=QUEUE,
    retry=Retry(attempts=20, delay="50ms", max_delay="250ms"),
    run=steps_body,
)


async def sleepy_body(work: Work, step: Step, ctx: JobContext) -> dict[str, Any]:
    """``before``, a one-second ``step.sleep``, then ``after``."""
    before = await step.run("before", _step_fn("before", work, ctx))
    await step.sleep("1s")
    after = await step.run("after", _step_fn("after", work, ctx))
    return {"before": before, "after": after}


SLEEPY_JOB: Final[Job[Work, dict[str, Any]]] = job(
    input=Work,
    idempotency_key=lambda w: w.key,
    name="faults.sleepy",
    queue=QUEUE,
    retry=Retry(attempts=5, delay="50ms"),
    run=sleepy_body,
)

HOSTILE: Final = (
    "it's",
    'say "hi"',
    "q; DROP TABLE x_jobs; --",
    "$1 %s %(name)s {x_jobs} ?",
    "x" * 150,
    "é" * 70,
    "名前🧨💥",
    "\u202eevil\u202c",
    "zero\u200bwidth",
    "back\\slash",
    "new\nline\ttab",
    "NOTIFY x_jobs, 'boom'",
)
"""Job names, queue names, tenants, keys and step names that must be stored and matched exactly
(each at most 200 characters, a job name's limit)."""


class Echo(BaseModel):
    key: str
    text: str


async def echo_body(echo: Echo, step: Step, ctx: JobContext) -> dict[str, Any]:
    async def fn(signal: Signal) -> dict[str, Any]:
        await effect(ctx.job_id, ctx.name, ctx.attempt, "start")
        return {"text": echo.text}

    out = await step.run(ctx.name, fn)
    return {"name": ctx.name, "tenant": ctx.tenant_id, "key": echo.key, "step": out}


def hostile_queue(name: str) -> str:
    """The queue of the hostile job ``name``: another hostile string, not the same one."""
    return f"q'{name}\";"


HOSTILE_JOBS: Final[tuple[Job[Echo, dict[str, Any]], ...]] = tuple(
    job(
        input=Echo,
        idempotency_key=lambda e: e.key,
        name=name,
        queue=hostile_queue(name),
        retry=Retry(attempts=3, delay="50ms"),
        run=echo_body,
    )
    for name in HOSTILE
)

KEYED_HOSTILE_JOB: Final[Job[Echo, dict[str, Any]]] = job(
    input=Echo,
    idempotency_key=lambda e: e.key,
    name="faults.hostile-keyed",
    queue=hostile_queue("keyed"),
    concurrency=Concurrency(key=lambda e: e.text, limit=1),
    retry=Retry(attempts=3, delay="50ms"),
    run=echo_body,
)
"""A job capped per hostile key: the lease key ``job:<name>:<key>`` carries the text."""


class Effectful(BaseModel):
    key: str
    mode: str = "tx"
    """``tx``: the effect is written by ``step.transaction`` on its connection; ``run``: by
    ``step.run`` on a connection of its own (committed at once)."""
    kill: bool = True
    """SIGKILL this process right after the FIRST effect, before the step's checkpoint."""


async def _killed_before(job_id: str) -> bool:
    query = sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE job_id = %s AND note = 'kill')").format(
        sql.Identifier(_target["schema"], "fault_effects")
    )
    async with await psycopg.AsyncConnection.connect(
        _target["dsn"], autocommit=True, connect_timeout=5
    ) as conn:
        cur = await conn.execute(query, (job_id,))
        row = await cur.fetchone()
        return bool(row and row[0])


async def _maybe_die(e: Effectful, job_id: str, attempt: int) -> None:
    """The first time only (a ``kill`` row marks it): SIGKILL between effect and checkpoint."""
    if e.kill and not await _killed_before(job_id):
        await effect(job_id, e.mode, attempt, "kill")
        os.kill(os.getpid(), signal.SIGKILL)


async def effect_body(e: Effectful, step: Step, ctx: JobContext) -> Any:
    if e.mode == "tx":

        async def in_tx(conn: Any) -> dict[str, int]:
            query = sql.SQL(
                "INSERT INTO {} (job_id, step, attempt, pid, note) VALUES (%s, %s, %s, %s, %s)"
            ).format(sql.Identifier(_target["schema"], "fault_effects"))
            await conn.execute(query, (ctx.job_id, "tx", ctx.attempt, os.getpid(), "effect"))
            await _maybe_die(e, ctx.job_id, ctx.attempt)
            return {"attempt": ctx.attempt}

        return await step.transaction("effect", in_tx)

    async def own(signal: Signal) -> dict[str, int]:
        await effect(ctx.job_id, "run", ctx.attempt, "effect")
        await _maybe_die(e, ctx.job_id, ctx.attempt)
        return {"attempt": ctx.attempt}

    return await step.run("effect", own)


EFFECT_JOB: Final[Job[Effectful, Any]] = job(
    input=Effectful,
    idempotency_key=lambda e: e.key,
    name="faults.effect",
    queue=QUEUE,
    retry=Retry(attempts=5, delay="50ms"),
    run=effect_body,
)
"""An effect killed between it and its checkpoint: once under ``step.transaction``, twice under
``step.run`` (the at-least-once contract; ``step.key`` is the way out for an external effect)."""


class Chaos(BaseModel):
    key: str
    mode: str
    """``tx`` (a ``step.transaction`` effect), ``run`` (a ``step.run`` effect), ``sleep`` (a
    step, a ``step.sleep``, a step) or ``capped`` (the keyed cap's job)."""
    group: str = "g0"


def _insert(table: str) -> sql.Composed:
    return sql.SQL(
        "INSERT INTO {} (job_id, step, attempt, pid, note) VALUES (%s, %s, %s, %s, %s)"
    ).format(sql.Identifier(_target["schema"], table))


async def chaos_body(c: Chaos, step: Step, ctx: JobContext) -> dict[str, Any]:
    if c.mode == "tx":

        async def in_tx(conn: Any) -> int:
            await conn.execute(
                _insert("fault_effects"), (ctx.job_id, "tx", ctx.attempt, os.getpid(), "effect")
            )
            return ctx.attempt

        await step.transaction("tx", in_tx)
    elif c.mode == "run":

        async def own(signal: Signal) -> int:
            await effect(ctx.job_id, "run", ctx.attempt, "effect")
            return ctx.attempt

        await step.run("run", own)
    else:

        def named(name: str) -> Callable[[Signal], Awaitable[int]]:
            async def fn(signal: Signal) -> int:
                await effect(ctx.job_id, name, ctx.attempt, "effect")
                return ctx.attempt

            return fn

        await step.run("a", named("a"))
        await step.sleep("300ms")
        await step.run("b", named("b"))
    return {"mode": c.mode, "pid": os.getpid()}


CHAOS_JOB: Final[Job[Chaos, dict[str, Any]]] = job(
    input=Chaos,
    idempotency_key=lambda c: c.key,
    name="chaos.mixed",
    queue=QUEUE,
    retry=Retry(attempts=25, delay="50ms", max_delay="250ms"),
    run=chaos_body,
)

CHAOS_CAP: Final = 2


async def capped_body(c: Chaos, step: Step, ctx: JobContext) -> dict[str, Any]:
    """Inside the keyed cap: the body records when it entered and left (``chaos_cap``), so the
    soak checks the cap as the bodies saw it."""
    table = sql.Identifier(_target["schema"], "chaos_cap")
    async with await psycopg.AsyncConnection.connect(
        _target["dsn"], autocommit=True, connect_timeout=5
    ) as conn:
        cur = await conn.execute(
            sql.SQL(
                "INSERT INTO {} (job_id, grp, pid, entered_at) VALUES (%s, %s, %s, "
                "clock_timestamp()) RETURNING id"
            ).format(table),
            (ctx.job_id, c.group, os.getpid()),
        )
        row = await cur.fetchone()
        assert row is not None
        await asyncio.sleep(0.03)
        await conn.execute(
            sql.SQL("UPDATE {} SET left_at = clock_timestamp() WHERE id = %s").format(table),
            (row[0],),
        )
    return {"mode": c.mode, "pid": os.getpid()}


CHAOS_CAPPED_JOB: Final[Job[Chaos, dict[str, Any]]] = job(
    input=Chaos,
    idempotency_key=lambda c: c.key,
    name="chaos.capped",
    queue=QUEUE,
    concurrency=Concurrency(key=lambda c: c.group, limit=CHAOS_CAP),
    retry=Retry(attempts=25, delay="50ms", max_delay="250ms"),
    run=capped_body,
)

JOBS: Final[list[Job[Any, Any]]] = [
    STEPS_JOB,
    SLEEPY_JOB,
    EFFECT_JOB,
    CHAOS_JOB,
    CHAOS_CAPPED_JOB,
    *HOSTILE_JOBS,
    KEYED_HOSTILE_JOB,
]

# --- the process ----------------------------------------------------------------------------------


class JsonLines(logging.Handler):
    """Every structured ``log_event`` as one JSON line, flushed at once."""

    def __init__(self, path: str) -> None:
        super().__init__(logging.DEBUG)
        self._file = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115

    def emit(self, record: logging.LogRecord) -> None:
        name = getattr(record, "event", None)
        if name is None:
            return
        fields = getattr(record, "x_fields", {})
        line = {
            "event": name,
            "level": record.levelname.lower(),
            "t": REAL_TIME(),
            "pid": os.getpid(),
            **fields,
        }
        self._file.write(json.dumps(line, default=str) + "\n")

    def close(self) -> None:
        self._file.close()
        super().close()


class OffsetClock:
    """The system clock moved ``offset_s`` seconds."""

    def __init__(self, offset_s: float) -> None:
        self._offset = timedelta(seconds=offset_s)

    def now(self) -> datetime:
        return datetime.now(UTC) + self._offset

    def now_ms(self) -> int:
        return int(self.now().timestamp() * 1000)


def skew_clock(offset_s: float) -> None:
    """Move this process's wall clock ``offset_s`` seconds (monotonic clocks stay true)."""
    real_time, real_time_ns = time.time, time.time_ns
    time.time = lambda: real_time() + offset_s
    time.time_ns = lambda: real_time_ns() + int(offset_s * 1_000_000_000)
    install_clock(OffsetClock(offset_s))


def dump_tasks() -> None:
    """SIGUSR1: print where every task of the loop is waiting (a hung worker's diagnosis)."""
    for task in asyncio.all_tasks():
        print(f"--- {task!r}", file=sys.stderr)
        task.print_stack(limit=12, file=sys.stderr)
    sys.stderr.flush()


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ultimat3_testkit.fault_app")
    p.add_argument("--dsn", required=True)
    p.add_argument("--schema", required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--worker-id", default=None)
    p.add_argument("--queues", default=QUEUE, help="comma-separated; '*': every job's queue")
    p.add_argument("--max-in-flight", type=int, default=None)
    p.add_argument("--pool-size", type=int, default=6)
    p.add_argument("--visibility-ms", type=int, default=1000)
    p.add_argument("--poll-ms", type=int, default=50)
    p.add_argument("--idle-max-ms", type=int, default=500)
    p.add_argument("--wake", action="store_true", help="start the wake, if the worker does not")
    p.add_argument("--wake-dsn", default=None, help="the LISTEN session's own DSN")
    p.add_argument("--probe-every-s", type=float, default=30.0)
    p.add_argument("--probe-timeout-s", type=float, default=2.0)
    p.add_argument(
        "--enqueue-delayed",
        action="append",
        default=[],
        metavar="KEY:DELAY_MS",
        help="enqueue faults.sleepy with this key and delay through the facade at start",
    )
    return p.parse_args(argv)


class FaultDriver(PostgresJobDriver):
    """The Postgres driver whose wake (``start_wake``, started by the worker or by :func:`serve`)
    dials ``wake_dsn`` with the probe timings asked for, and logs every wake as
    ``faults.wake`` with the session count (``sessions`` 2 and up: after a re-dial)."""

    def __init__(self, dsn: str, *, schema: str, max_size: int, args: argparse.Namespace):
        super().__init__(dsn, schema=schema, max_size=max_size)
        self._args = args
        self.wake_handle: QueueWake | None = None

    async def start_wake(
        self, on_wake: Callable[[str], object], *, queues: Collection[str] | None = None
    ) -> QueueWake:
        def logged(queue: str) -> None:
            sessions = self.wake_handle.sessions if self.wake_handle is not None else 0
            log_event("faults.wake", queue=queue, sessions=sessions)
            on_wake(queue)

        self.wake_handle = await start_queue_wake(
            self,
            logged,
            queues=queues,
            dsn=self._args.wake_dsn,
            probe_timeout_s=self._args.probe_timeout_s,
            probe_every_s=self._args.probe_every_s,
        )
        return self.wake_handle


async def serve(args: argparse.Namespace) -> int:
    configure(args.dsn, args.schema)
    driver = FaultDriver(args.dsn, schema=args.schema, max_size=args.pool_size, args=args)
    install_job_driver(driver)
    worker = job_worker(
        jobs=JOBS,
        queues=None if args.queues == "*" else args.queues.split(","),
        max_in_flight=args.max_in_flight,
        poll_interval_ms=args.poll_ms,
        idle_poll_max_ms=args.idle_max_ms,
        visibility_timeout_ms=args.visibility_ms,
        driver=driver,
        worker_id=args.worker_id,
        handle_signals=False,
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
    try:
        await worker.start()
    except XError as exc:
        log_event("faults.refused", code=exc.code, message=exc.message, fix=exc.fix)
        await driver.close()
        return 2
    own_wake = None
    if args.wake and driver.wake_handle is None:  # a worker that does not start the wake itself
        own_wake = await driver.start_wake(worker.wake, queues=worker.queues)
    for spec in args.enqueue_delayed:
        key, _, delay_ms = spec.rpartition(":")
        done = await SLEEPY_JOB.enqueue(Work(key=key), delay=int(delay_ms))
        log_event("faults.enqueued", key=key, id=done.id, deduped=done.deduped)
    log_event(
        "faults.ready",
        worker_id=worker.id,
        pool_size=driver.pool_size,
        clock_ms=current_clock().now_ms(),  # this process's own clocks, skewed or not
        wall_s=time.time(),
    )
    await stop.wait()
    await worker.drain(signal_name="SIGTERM")
    if own_wake is not None:
        await own_wake.stop()
    log_event("faults.stopped", **asdict(worker.stats()))
    await driver.close()
    return 0


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    offset = float(os.environ.get("FAULTS_CLOCK_OFFSET_S") or 0)
    if offset:
        skew_clock(offset)
    logger = logging.getLogger("ultimat3")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(JsonLines(args.events))
    logger.propagate = False
    return asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
